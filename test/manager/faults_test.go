package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// apiProxy stands between the manager replicas and the kube-apiserver, as a load balancer or an
// overloaded API server would: while faults are on, it delays requests, answers 429 (priority
// and fairness) and 500 (an etcd timeout) without passing them on, lets another writer change
// an object just before the manager's update of it (the API server then answers 409 to an update
// that names the version it read, and the newer version reaches the manager's watch, as in a real
// cluster: a 409 the proxy made up would stand for a newer version that does not exist), and
// passes a write on but drops its answer (the write landed; the client cannot know). Watches pass
// through untouched.
type apiProxy struct {
	addr     string
	target   *url.URL
	admin    *http.Client
	mu       sync.Mutex
	on       bool
	rng      *rand.Rand
	injected map[string]int
	touches  int
}

func startAPIProxy(t *testing.T, cfg *rest.Config, seed uint64) *apiProxy {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(cfg) // the admin's client certificate; impersonation headers pass through
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{target: target, admin: &http.Client{Transport: transport, Timeout: 10 * time.Second},
		rng: rand.New(rand.NewPCG(seed, 36)), injected: map[string]int{}} //nolint:gosec // test randomness
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusConflict && resp.Request.Context().Value(touchedKey{}) != nil {
				p.count("409 after another writer")
			}
			return nil
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, rp) }))
	t.Cleanup(srv.Close)
	p.addr = srv.URL
	return p
}

// faults turns the faults on or off.
func (p *apiProxy) faults(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = on
}

// counts is how many faults of each kind were injected.
func (p *apiProxy) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.injected)
}

// serve passes r on to next, with a fault while faults are on.
func (p *apiProxy) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	kind, delay := p.pick(r)
	switch kind {
	case "latency":
		time.Sleep(delay)
	case "429":
		w.Header().Set("Retry-After", "1")
		apiStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "the server has received too many requests and has asked us to try again later")
		return
	case "500":
		apiStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcdserver: request timed out")
		return
	case "another writer first":
		// Not the manager's request context: a replica that exits meanwhile does not stop another writer.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		err := p.touch(ctx, otherWritable(r.URL.Path))
		cancel()
		if errors.Is(err, errGone) {
			p.count("another writer found the object gone")
			break
		}
		if err != nil {
			p.count("another writer failed: " + err.Error())
			break
		}
		// The update goes on, naming the version the other writer replaced (its 409 is counted
		// by the proxy's ModifyResponse).
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), touchedKey{}, true)))
		return
	case "dropped answer":
		lost := httptest.NewRecorder()
		next.ServeHTTP(lost, r) // the write lands
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
			}
		}
		return
	}
	next.ServeHTTP(w, r)
}

// pick is the fault r gets ("" for none), counted, and the delay of a "latency".
func (p *apiProxy) pick(r *http.Request) (string, time.Duration) {
	if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
		return "", 0
	}
	p.mu.Lock()
	if !p.on {
		p.mu.Unlock()
		return "", 0
	}
	roll, other := p.rng.Float64(), p.rng.Float64()
	delay := time.Duration(200+p.rng.IntN(600)) * time.Millisecond
	p.mu.Unlock()
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	kind := ""
	switch {
	case roll < 0.05:
		kind = "latency"
	case roll < 0.08:
		kind = "429"
	case roll < 0.11:
		kind = "500"
	case roll < 0.14 && write:
		kind = "dropped answer"
	case other < 0.10 && (r.Method == http.MethodPut || r.Method == http.MethodPatch) && otherWritable(r.URL.Path) != "" && namesVersion(r):
		// Another writer first, one update in ten where that makes a conflict: an update that
		// names the version it read (a PUT always does; a PATCH when it carries a
		// resourceVersion precondition).
		kind = "another writer first"
	}
	if kind != "" {
		p.count(kind)
	}
	return kind, delay
}

func (p *apiProxy) count(kind string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.injected[kind]++
}

// namesVersion says whether the update r names the resourceVersion it read (r's body is kept).
func namesVersion(r *http.Request) bool {
	switch r.Method {
	case http.MethodPut:
		return true
	case http.MethodPatch:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return false // the body is broken anyway: passed on as it is
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		return bytes.Contains(body, []byte(`"resourceVersion"`))
	}
	return false
}

// touchedKey marks, in a request's context, an update another writer came before.
type touchedKey struct{}

// otherWritable is the path of the object an update of path writes (its subresource dropped),
// where another writer may change it first: a namespaced object the manager does not own alone
// (not its leader-election Lease, not an Event); "" otherwise.
func otherWritable(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	i := slices.Index(parts, "namespaces")
	if i < 0 || len(parts) < i+4 || strings.Contains(path, "/coordination.k8s.io/") || parts[i+2] == "events" {
		return ""
	}
	return "/" + strings.Join(parts[:i+4], "/")
}

// touch is another writer (kubectl annotate, another controller) changing the object at path:
// its resourceVersion moves on.
func (p *apiProxy) touch(ctx context.Context, path string) error {
	p.mu.Lock()
	p.touches++
	n := p.touches
	p.mu.Unlock()
	body := fmt.Sprintf(`{"metadata":{"annotations":{"test.caprf.dev/other-writer":"%d"}}}`, n)
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, p.target.JoinPath(path).String(), strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := p.admin.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusNotFound:
		return errGone // deleted meanwhile: nobody can change it
	}
	return fmt.Errorf("%s", resp.Status)
}

var errGone = errors.New("the object is gone")

func apiStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: reason, Message: msg}) //nolint:gosec // HTTP status codes fit
}

// bmcFaults injects the faults of real BMCs into a fleet at random, one at a time per server,
// while it runs: bursts of 5xx, a hang past the attempt timeout, 409 on power actions, sessions
// expired, the BMC itself reset (503 while it restarts) and answers to POSTs dropped after the
// request was carried out.
type bmcFaults struct {
	servers  []*simulator.Server
	rng      *rand.Rand
	mu       sync.Mutex
	injected map[string]int
}

func (b *bmcFaults) run() func() {
	b.injected = map[string]int{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Hangs are the rarest: each holds the BMC's calls for the attempt timeout.
		const maxHangs = 2
		hangs := 0
		for {
			select {
			case <-stop:
				return
			// About one fault every 2.5s in the fleet, one every 10s per BMC: each flow meets
			// several, and gets through between them (an open breaker waits out 30s).
			case <-time.After(time.Duration(1000+b.rng.IntN(3000)) * time.Millisecond):
			}
			s := b.servers[b.rng.IntN(len(b.servers))]
			kind := ""
			switch b.rng.IntN(7) {
			case 0:
				kind = "5xx burst"
				s.Fault.ErrorBurst(1+b.rng.IntN(4), []int{500, 502, 503}[b.rng.IntN(3)])
			case 1:
				kind = "409 on power actions"
				s.Fault.Conflicts(1 + b.rng.IntN(2))
			case 2:
				kind = "sessions expired"
				s.ExpireSessions()
			case 3:
				kind = "BMC reset"
				s.ResetBMC(time.Duration(500+b.rng.IntN(1000)) * time.Millisecond)
			case 4:
				// The answer of the next power action, media insert or erase is lost after the
				// BMC carried it out: the provider must find out from the BMC, not send it again.
				action := []string{"/Actions/ComputerSystem.Reset", "/Actions/VirtualMedia.InsertMedia", "/Actions/Drive.SecureErase"}[b.rng.IntN(3)]
				kind = "answer dropped: " + action[strings.LastIndex(action, "/")+1:]
				s.Fault.DropResponsesTo(http.MethodPost, action, 1)
			case 5:
				kind = "PATCH answer dropped"
				s.Fault.DropResponses(http.MethodPatch, 1)
			case 6:
				if hangs >= maxHangs {
					continue
				}
				// Past the manager's 15s attempt timeout: the requests in flight are given up on,
				// and the BMC answers again a little later.
				hangs++
				kind = "hang past the attempt timeout"
				s.Fault.Hang()
				hang := time.Duration(16+b.rng.IntN(4)) * time.Second
				go func() {
					select {
					case <-stop:
					case <-time.After(hang):
					}
					s.Fault.Unhang()
				}()
			}
			b.mu.Lock()
			b.injected[kind]++
			b.mu.Unlock()
		}
	}()
	return func() {
		close(stop)
		<-done
		for _, s := range b.servers {
			s.Fault.Unhang()
			s.Fault.ErrorBurst(0, 0)
			s.Fault.Conflicts(0)
			s.Fault.DropResponses(http.MethodPost, 0)
			s.Fault.DropResponses(http.MethodPatch, 0)
		}
	}
}

func (b *bmcFaults) counts() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.injected)
}

// droppedDestructive counts the destructive requests whose answer a fault dropped after the BMC
// carried them out.
func (l *lifecycle) droppedDestructive() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rs := range l.requests {
		for _, r := range rs {
			if r.Dropped && destructive(r) != "" {
				n++
			}
		}
	}
	return n
}

// peakRate is the most requests one BMC got in any one second of the run, counting those only
// that it failed (answered 409 or 5xx, or left unanswered by a hang) when failing is set, and the
// server's ID.
func (l *lifecycle) peakRate(failing bool) (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	peak, where := 0, ""
	for id, rs := range l.requests {
		per := map[int64]int{}
		for _, r := range rs {
			if failing && (r.Dropped || (r.Status != 0 && r.Status != http.StatusConflict && r.Status < 500)) {
				continue
			}
			per[r.Received.Unix()]++
		}
		for _, n := range per {
			if n > peak {
				peak, where = n, id
			}
		}
	}
	return peak, where
}
