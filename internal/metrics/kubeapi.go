package metrics

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// KubeRequests counts the requests this manager sends to the management cluster's API server, by
// verb (get, list, watch, create, update, patch, delete, deletecollection), resource (with its
// subresource: "redfishhosts/status") and status code. client-go's own rest_client_requests_total
// has no resource, so it cannot tell which object kind costs the requests.
var KubeRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "caprf_kube_api_requests_total", Help: "Requests sent to the management cluster API server, by verb, resource and status code.",
}, []string{"verb", "resource", "code"})

func init() { ctrlmetrics.Registry.MustRegister(KubeRequests) }

// CountKubeRequests wraps a client-go transport so that every request is counted in KubeRequests;
// use it as rest.Config.Wrap(metrics.CountKubeRequests).
func CountKubeRequests(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		verb, resource := KubeRequestKind(req.Method, req.URL)
		resp, err := rt.RoundTrip(req)
		code := "error"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		KubeRequests.WithLabelValues(verb, resource, code).Inc()
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// KubeRequestKind names the Kubernetes API verb and resource of a request to an API server:
// GET /apis/g/v/namespaces/ns/redfishhosts is ("list", "redfishhosts"); with ?watch=true it is a
// watch; PUT …/redfishhosts/h/status is ("update", "redfishhosts/status"). Paths that name no
// resource (discovery, /version, /openapi) are ("get", "-").
func KubeRequestKind(method string, u *url.URL) (verb, resource string) {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	var rest []string
	// The API server may sit behind a path prefix (a proxy): the first api or apis segment starts
	// the Kubernetes path.
	for i, p := range parts {
		if p == "api" && len(parts) >= i+3 { // /api/v1/...
			rest = parts[i+2:]
			break
		}
		if p == "apis" && len(parts) >= i+4 { // /apis/group/version/...
			rest = parts[i+3:]
			break
		}
	}
	// namespaces/<ns>/<resource>/... is namespaced; namespaces/<name>[/<subresource>] is the
	// namespace itself.
	if len(rest) >= 3 && rest[0] == "namespaces" && (len(rest) > 3 || (rest[2] != "status" && rest[2] != "finalize")) {
		rest = rest[2:]
	}
	name := ""
	switch len(rest) {
	case 0:
		resource = "-"
	case 1:
		resource = rest[0]
	case 2:
		resource, name = rest[0], rest[1]
	default:
		// One subresource segment: what follows it (a proxied path) would make labels unbounded.
		resource, name = rest[0]+"/"+rest[2], rest[1]
	}
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case resource == "-" || name != "":
			verb = "get"
		case u.Query().Get("watch") == "true" || u.Query().Get("watch") == "1":
			verb = "watch"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if name == "" {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return verb, resource
}

// IsKubeWrite reports whether verb changes objects.
func IsKubeWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}
