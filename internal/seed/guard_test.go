package seed

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// countingReader counts the full Secret reads that reach the API server.
type countingReader struct {
	client.Reader
	gets    atomic.Int64
	blocked chan struct{} // when set, every Get waits for it to close
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	if c.blocked != nil {
		<-c.blocked
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// serve sends one request from source (host:port) through the server's handler.
func serve(h http.Handler, source, path string) int {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = source
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestWrongTokensAndUnknownSeedsNeverReachTheAPIServer(t *testing.T) {
	_, c := world(t, "")
	reads := &countingReader{Reader: c}
	srv := &Server{Seeds: c, Reader: reads, Hosts: c, Rate: 1e6, Burst: 1e6}
	h := srv.Handler()
	for i := range 300 {
		source := fmt.Sprintf("10.0.%d.%d:1234", i/250, i%250)
		serve(h, source, "/v1/ns/m1/"+strings.Repeat("0", 64)+"/meta-data")  // a real seed, a wrong token
		serve(h, source, fmt.Sprintf("/v1/ns/m%d/%s/user-data", i+2, token)) // no such seed
	}
	// One read of the real seed, to learn its token; nothing for the rest.
	if n := reads.gets.Load(); n != 1 {
		t.Errorf("600 unauthenticated requests made %d Secret reads, want 1", n)
	}
	if code := serve(h, "10.9.9.9:1", "/v1/ns/m1/"+token+"/meta-data"); code != http.StatusOK {
		t.Errorf("the right token got %d", code)
	}
}

func TestOnlySeedSecretsControlledByTheirRedfishMachineAreServed(t *testing.T) {
	ts, c := world(t, "")
	for name, s := range map[string]*corev1.Secret{
		"m2": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m2"), OwnerReferences: ownedByMachine("m2")}}, // an Opaque Secret
		"m3": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m3")}, Type: SecretType},                      // no owner
		"m4": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m4"), OwnerReferences: ownedByMachine("other")}, Type: SecretType},
	} {
		s.Data = map[string][]byte{KeyToken: []byte(token), KeyBootstrapSecret: []byte("boot"), KeyImageURL: []byte("https://x/y")}
		if err := c.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"user-data", "meta-data", "image"} {
			if status, body := get(t, Dir(ts.URL, "ns", name, token)+f); status != 404 {
				t.Errorf("%s of %s: %d %q, want 404", f, s.Name, status, body)
			}
		}
	}
}

func TestEveryPathIsRateLimitedPerSource(t *testing.T) {
	_, c := world(t, "")
	h := (&Server{Seeds: c, Reader: c, Hosts: c, Rate: 1, Burst: 10}).Handler()
	for _, path := range []string{"/v1/ns/m1/" + token + "/meta-data", "/v1/ns/m9/x/user-data", "/v1/anything"} {
		limited := 0
		for range 30 {
			if serve(h, "192.0.2.1:4000", path) == http.StatusTooManyRequests {
				limited++
			}
		}
		if limited < 15 {
			t.Errorf("%s: %d of 30 rapid requests from one source refused, want about 20", path, limited)
		}
		// A source is limited on its own: the next one is not.
		if code := serve(h, "192.0.2.2:4000", "/v1/ns/m1/"+token+"/meta-data"); code != http.StatusOK {
			t.Errorf("another source got %d after %s was flooded", code, path)
		}
		h = (&Server{Seeds: c, Reader: c, Hosts: c, Rate: 1, Burst: 10}).Handler()
	}
	// Every IPv6 address is a source of its own: the hosts of a provisioning LAN share a /64.
	for range 30 {
		serve(h, "[2001:db8::1]:4000", "/v1/ns/m1/"+token+"/meta-data")
	}
	if code := serve(h, "[2001:db8::1]:4000", "/v1/ns/m1/"+token+"/meta-data"); code != http.StatusTooManyRequests {
		t.Errorf("a flooding IPv6 address got %d, want 429", code)
	}
	if code := serve(h, "[2001:db8::2]:4000", "/v1/ns/m1/"+token+"/meta-data"); code != http.StatusOK {
		t.Errorf("its neighbour in the same /64 got %d", code)
	}
}

// A BMC reads the seed volume in many range requests: the bootstrap data is read from the API
// server once, not per request.
func TestTheSeedVolumeReadInManyRequestsReadsTheBootstrapDataOnce(t *testing.T) {
	_, c := world(t, "")
	reads := &countingReader{Reader: c}
	h := (&Server{Seeds: c, Reader: reads, Hosts: c}).Handler()
	for i := range 20 {
		r := httptest.NewRequest(http.MethodGet, "/v1/ns/m1/"+token+"/cidata.iso", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", i*2048, i*2048+2047))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusPartialContent && w.Code != http.StatusOK && w.Code != http.StatusRequestedRangeNotSatisfiable {
			t.Fatalf("range request %d: %d", i, w.Code)
		}
	}
	if n := reads.gets.Load(); n != 2 {
		t.Errorf("20 range reads of the volume made %d Secret reads, want 2 (the seed and the bootstrap data, once each)", n)
	}
}

func TestAFullSourceTableForgetsOnlyTheQuietestSource(t *testing.T) {
	_, c := world(t, "")
	h := (&Server{Seeds: c, Reader: c, Hosts: c, Rate: 0.001, Burst: 2}).Handler()
	flooder := "198.51.100.1:1"
	for range 3 {
		serve(h, flooder, "/v1/x")
	}
	// Fill the table with other sources; the flooder keeps sending, so it is never the quietest.
	for i := range maxSources + 10 {
		serve(h, fmt.Sprintf("10.%d.%d.%d:1", i>>16, (i>>8)&255, i&255), "/v1/x")
		if i%512 == 0 {
			if code := serve(h, flooder, "/v1/x"); code != http.StatusTooManyRequests {
				t.Fatalf("after %d other sources the flooder got %d: its limit was reset", i, code)
			}
		}
	}
	if code := serve(h, flooder, "/v1/x"); code != http.StatusTooManyRequests {
		t.Errorf("the flooder got %d once the table was full: its limit was reset", code)
	}
}

func TestRequestsPastTheConcurrencyCapAreAnswered503AtOnce(t *testing.T) {
	_, c := world(t, "")
	reads := &countingReader{Reader: c, blocked: make(chan struct{})}
	srv := &Server{Seeds: c, Reader: reads, Hosts: c, MaxInFlight: 2}
	h := srv.Handler()
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for i := range 2 {
		wg.Go(func() { codes <- serve(h, fmt.Sprintf("10.1.1.%d:1", i+1), "/v1/ns/m1/"+token+"/meta-data") })
	}
	for len(srv.inFlight) < 2 { // both in flight: one reading, one waiting for that read
		time.Sleep(time.Millisecond)
	}
	if code := serve(h, "10.1.1.9:1", "/v1/ns/m1/"+token+"/meta-data"); code != http.StatusServiceUnavailable {
		t.Errorf("a third request while two are in flight got %d, want 503", code)
	}
	close(reads.blocked)
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a request in flight got %d, want 200", code)
		}
	}
	if n := reads.gets.Load(); n != 1 {
		t.Errorf("two concurrent requests for one seed read it %d times, want 1", n)
	}
}

// A machine deleted and created again under its name (a GitOps re-apply) gets its own bootstrap
// data at once, never the data kept for its predecessor's seed.
func TestARecreatedMachineGetsItsOwnBootstrapData(t *testing.T) {
	ts, c := world(t, "")
	if status, body := get(t, Dir(ts.URL, "ns", "m1", token)+"user-data"); status != 200 || !strings.Contains(body, "kubeadm join") {
		t.Fatalf("first seed: %d %q", status, body)
	}
	ctx := t.Context()
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m1")}}); err != nil {
		t.Fatal(err)
	}
	boot := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "boot"}, boot); err != nil {
		t.Fatal(err)
	}
	boot.Data["value"] = []byte("#cloud-config for the new cluster\n")
	if err := c.Update(ctx, boot); err != nil {
		t.Fatal(err)
	}
	const token2 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m1"), UID: "uid-new", OwnerReferences: ownedByMachine("m1")},
		Type: SecretType, Data: map[string][]byte{KeyToken: []byte(token2), KeyBootstrapSecret: []byte("boot")}}); err != nil {
		t.Fatal(err)
	}
	if status, body := get(t, Dir(ts.URL, "ns", "m1", token2)+"user-data"); status != 200 || body != "#cloud-config for the new cluster\n" {
		t.Errorf("the recreated machine's seed served %d %q, want its own data", status, body)
	}
	if status, _ := get(t, Dir(ts.URL, "ns", "m1", token)+"user-data"); status != 404 {
		t.Errorf("the old token still answers %d", status)
	}
}

// What the caches hold (tokens, bootstrap data, volumes) goes once its time is up, with or
// without more requests.
func TestTheCachesForgetSecretsOnTheirOwn(t *testing.T) {
	_, c := world(t, "")
	srv := &Server{Seeds: c, Reader: c, Hosts: c}
	if code := serve(srv.Handler(), "10.0.0.1:1", "/v1/ns/m1/"+token+"/cidata.iso"); code != http.StatusOK {
		t.Fatalf("cidata.iso: %d", code)
	}
	if len(srv.seeds) != 1 || len(srv.bootstrap) != 1 || len(srv.volumes) != 1 {
		t.Fatalf("caches %d %d %d, want one entry each", len(srv.seeds), len(srv.bootstrap), len(srv.volumes))
	}
	// Age them past their TTLs, then sweep as the ticker does.
	for k, v := range srv.seeds {
		v.read = v.read.Add(-seedTTL)
		srv.seeds[k] = v
	}
	for k, v := range srv.bootstrap {
		v.read = v.read.Add(-bootstrapTTL)
		srv.bootstrap[k] = v
	}
	for k, v := range srv.volumes {
		v.built = v.built.Add(-volumeTTL)
		srv.volumes[k] = v
	}
	srv.sweepNow()
	if len(srv.seeds)+len(srv.bootstrap)+len(srv.volumes) != 0 {
		t.Errorf("caches %d %d %d after their time, want empty", len(srv.seeds), len(srv.bootstrap), len(srv.volumes))
	}
}
