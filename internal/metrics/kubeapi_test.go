package metrics

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestKubeRequestKind(t *testing.T) {
	for _, tc := range []struct{ method, path, verb, resource string }{
		{"GET", "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/rack/redfishhosts", "list", "redfishhosts"},
		{"GET", "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/rack/redfishhosts?watch=true&resourceVersion=5", "watch", "redfishhosts"},
		{"GET", "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/redfishhosts?watch=1", "watch", "redfishhosts"},
		{"GET", "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/rack/redfishhosts/h-1", "get", "redfishhosts"},
		{"PUT", "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/rack/redfishhosts/h-1/status", "update", "redfishhosts/status"},
		{"PATCH", "/apis/cluster.x-k8s.io/v1beta2/namespaces/rack/machines/m-1", "patch", "machines"},
		{"POST", "/api/v1/namespaces/rack/events", "create", "events"},
		{"POST", "/apis/events.k8s.io/v1/namespaces/rack/events", "create", "events"},
		{"DELETE", "/api/v1/namespaces/rack/secrets/s", "delete", "secrets"},
		{"DELETE", "/api/v1/namespaces/rack/secrets", "deletecollection", "secrets"},
		{"GET", "/api/v1/namespaces/rack", "get", "namespaces"},
		{"GET", "/api/v1/nodes", "list", "nodes"},
		{"GET", "/api/v1/namespaces", "list", "namespaces"},
		{"GET", "/apis", "get", "-"},
		{"GET", "/apis/cluster.x-k8s.io/v1beta2", "get", "-"},
		{"GET", "/version", "get", "-"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/caprf-system/leases/controller-leader-election-caprf", "update", "leases"},
		{"PUT", "/api/v1/namespaces/rack/status", "update", "namespaces/status"},
		{"PUT", "/api/v1/namespaces/rack/finalize", "update", "namespaces/finalize"},
		{"GET", "/k8s/clusters/c-1/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/rack/redfishhosts", "list", "redfishhosts"},
		{"GET", "/api/v1/namespaces/rack/pods/p/proxy/some/deep/path", "get", "pods/proxy"},
		{"GET", "/api/v1/namespaces/rack/secrets", "list", "secrets"},
	} {
		u, err := url.Parse(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		verb, resource := KubeRequestKind(tc.method, u)
		if verb != tc.verb || resource != tc.resource {
			t.Errorf("%s %s: got (%s, %s), want (%s, %s)", tc.method, tc.path, verb, resource, tc.verb, tc.resource)
		}
	}
}

func TestCountKubeRequestsCountsByVerbResourceAndCode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusConflict)
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: CountKubeRequests(http.DefaultTransport)}
	before := testutil.ToFloat64(KubeRequests.WithLabelValues("update", "redfishhosts/status", "409"))
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/rack/redfishhosts/h/status", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := testutil.ToFloat64(KubeRequests.WithLabelValues("update", "redfishhosts/status", "409")) - before; got != 1 {
		t.Fatalf("counted %v conflicting status updates, want 1", got)
	}
}
