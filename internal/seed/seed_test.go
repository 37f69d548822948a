package seed

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

const token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// world is a seed server over a fake API: one claim's seed Secret and bootstrap data, and hosts.
func world(t testing.TB, format string, hosts ...*infrav1.RedfishHost) (*httptest.Server, client.Client) {
	t.Helper()
	ts, c, _ := worldServer(t, format, hosts...)
	return ts, c
}

// worldServer is world, with the server (to change its readers before the first request).
func worldServer(t testing.TB, format string, hosts ...*infrav1.RedfishHost) (*httptest.Server, client.Client, *Server) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	data := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "boot"}, Data: map[string][]byte{"value": []byte("#cloud-config\nruncmd: [kubeadm join]\n")}}
	if format != "" {
		data.Data["format"] = []byte(format)
		data.Data["value"] = []byte(`{"ignition":{"version":"3.4.0"}}`)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m1"), OwnerReferences: ownedByMachine("m1")}, Type: SecretType, Data: map[string][]byte{
		KeyToken: []byte(token), KeyBootstrapSecret: []byte("boot"), KeyProviderID: []byte("redfish://ns/h1/m1"),
		KeyHostname: []byte("m1"), KeyInstanceID: []byte("uid-1"), KeyImageURL: []byte("https://images.example/os.iso"),
		KeyBootMAC: []byte("52:54:00:00:00:01"),
	}}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(data, sec).WithIndex(&infrav1.RedfishHost{}, BootMACIndex, IndexBootMAC)
	for _, h := range hosts {
		b = b.WithObjects(h)
	}
	c := b.Build()
	srv := &Server{Seeds: c, Reader: c, Hosts: c}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	srv.BaseURL = ts.URL
	return ts, c, srv
}

func ownedByMachine(name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "RedfishMachine", Name: name, UID: "uid-rm", Controller: ptr.To(true)}}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url) //nolint:noctx // test
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestSeedFilesNeedTheClaimsToken(t *testing.T) {
	ts, c := world(t, "")
	dir := Dir(ts.URL, "ns", "m1", token)
	for _, tc := range []struct {
		url        string
		wantStatus int
		wantBody   string
	}{
		{dir + "meta-data", 200, "instance-id: uid-1\nlocal-hostname: m1\nprovider-id: redfish://ns/h1/m1\n"},
		{dir + "user-data", 200, "#cloud-config\nruncmd: [kubeadm join]\n"},
		{dir + "network-config", 200, `macaddress: "52:54:00:00:00:01"`},
		{dir + "ignition.json", 404, ""},
		{dir + "image", 302, ""},
		{Dir(ts.URL, "ns", "m1", strings.Repeat("0", 64)) + "meta-data", 404, ""},
		{Dir(ts.URL, "ns", "m2", token) + "meta-data", 404, ""},
		{Dir(ts.URL, "other", "m1", token) + "user-data", 404, ""},
		{dir + "anything-else", 404, ""},
	} {
		status, body := get(t, tc.url)
		if status != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
			t.Errorf("GET %s: %d %q, want %d containing %q", strings.TrimPrefix(tc.url, ts.URL), status, body, tc.wantStatus, tc.wantBody)
		}
	}

	t.Run("image redirects to the claim's image URL", func(t *testing.T) {
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(dir + "image") //nolint:noctx // test
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://images.example/os.iso" {
			t.Errorf("GET image: %d Location %q, want 302 to https://images.example/os.iso", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("the volume holds the same seed, labelled cidata", func(t *testing.T) {
		status, body := get(t, dir+"cidata.iso")
		if status != 200 {
			t.Fatalf("GET cidata.iso: %d", status)
		}
		label, files, err := ReadVolume([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if label != "cidata" || string(files["user-data"]) != "#cloud-config\nruncmd: [kubeadm join]\n" || !strings.Contains(string(files["meta-data"]), "provider-id: redfish://ns/h1/m1") || files["network-config"] == nil {
			t.Errorf("volume %q with %v", label, files)
		}
	})

	t.Run("everything answers 404 once the seed Secret is gone (the Node joined)", func(t *testing.T) {
		if err := c.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m1")}}); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"meta-data", "user-data", "cidata.iso", "image"} {
			if status, _ := get(t, dir+f); status != 404 {
				t.Errorf("GET %s after the Node joined: %d, want 404", f, status)
			}
		}
	})
}

func TestIgnitionBootstrapDataIsServedAsIgnitionOnly(t *testing.T) {
	ts, _ := world(t, "ignition")
	dir := Dir(ts.URL, "ns", "m1", token)
	if status, body := get(t, dir+"ignition.json"); status != 200 || !strings.Contains(body, `"version":"3.4.0"`) {
		t.Errorf("ignition.json: %d %q", status, body)
	}
	for _, f := range []string{"user-data", "cidata.iso"} {
		if status, _ := get(t, dir+f); status != 404 {
			t.Errorf("%s of Ignition data: %d, want 404", f, status)
		}
	}
}

func TestIPXEScriptOfIgnitionBootstrapDataPointsIgnitionAtItsConfig(t *testing.T) {
	ts, _ := world(t, "ignition", provisioningHost("pxe", "52:54:00:00:00:01", infrav1.BootMethodPXE, true))
	dir := Dir(ts.URL, "ns", "m1", token)
	status, body := get(t, ts.URL+"/v1/ipxe/52:54:00:00:00:01")
	if status != 200 || !strings.Contains(body, "ignition.config.url="+dir+"ignition.json") || strings.Contains(body, "nocloud") {
		t.Errorf("iPXE script for Ignition data: %d %q", status, body)
	}
	// Fedora CoreOS runs Ignition only with ignition.firstboot, Flatcar with flatcar.first_boot,
	// and both need the platform.
	for _, arg := range []string{" ignition.firstboot ", " flatcar.first_boot=1 ", " ignition.platform.id=metal "} {
		if !strings.Contains(body, arg) {
			t.Errorf("iPXE script for Ignition data lacks %q: %q", strings.TrimSpace(arg), body)
		}
	}
}

// The window ends when the Node joins: the host is Provisioned then (and a disk image's seed
// Secret deleted); either closes it.
func TestIPXEWindowClosesOnceTheNodeJoined(t *testing.T) {
	done := provisioningHost("done", "52:54:00:00:00:01", infrav1.BootMethodPXE, true)
	done.Status.State = infrav1.HostStateProvisioned
	ts, c := world(t, "", done, provisioningHost("booting", "52:54:00:00:00:02", infrav1.BootMethodPXE, true))
	if status, _ := get(t, ts.URL+"/v1/ipxe/52:54:00:00:00:01"); status != 404 {
		t.Errorf("a Provisioned host got %d, want 404", status)
	}
	if status, _ := get(t, ts.URL+"/v1/ipxe/52:54:00:00:00:02"); status != 200 {
		t.Fatalf("a host in its window got %d, want 200", status)
	}
	if err := c.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m1")}}); err != nil {
		t.Fatal(err)
	}
	if status, body := get(t, ts.URL+"/v1/ipxe/52:54:00:00:00:02"); status != 404 || strings.Contains(body, token) {
		t.Errorf("after the seed Secret was deleted: %d %q, want 404 without the token", status, body)
	}
}

// A seed naming its host is served while the host's claim by its machine provisions; once the Node
// joined only for LiveBootWindow after each power-on the provider sent a live node; never for a
// host another machine claims.
func TestASeedIsServedOnlyWithinItsHostsWindows(t *testing.T) {
	ts, c := world(t, "", provisioningHost("h1", "52:54:00:00:00:01", infrav1.BootMethodVirtualMedia, true))
	sec := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: SecretName("m1")}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[KeyHost] = []byte("h1")
	if err := c.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	dir := Dir(ts.URL, "ns", "m1", token)
	host := func(edit func(h *infrav1.RedfishHost)) {
		t.Helper()
		h := &infrav1.RedfishHost{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "h1"}, h); err != nil {
			t.Fatal(err)
		}
		edit(h)
		if err := c.Update(t.Context(), h); err != nil {
			t.Fatal(err)
		}
	}
	served := func(when string, want bool) {
		t.Helper()
		for _, f := range []string{"user-data", "cidata.iso", "image"} {
			status, body := get(t, dir+f)
			if ok := status < 400; ok != want || (!want && strings.Contains(body, "kubeadm")) {
				t.Errorf("%s: GET %s answered %d, want served %v", when, f, status, want)
			}
		}
	}
	served("while its host provisions", true)
	host(func(h *infrav1.RedfishHost) {
		h.Status.State, h.Status.Claim.Provisioned = infrav1.HostStateProvisioned, true
	})
	served("once its Node joined", false)
	host(func(h *infrav1.RedfishHost) {
		h.Status.LiveBootIssuedAt = &metav1.Time{Time: time.Now().Add(-time.Minute)}
	})
	served("a minute after a power-on of the live image", true)
	host(func(h *infrav1.RedfishHost) {
		h.Status.LiveBootIssuedAt = &metav1.Time{Time: time.Now().Add(-LiveBootWindow - time.Second)}
	})
	served("once the window after that power-on closed", false)
	host(func(h *infrav1.RedfishHost) {
		h.Status.LiveBootIssuedAt = &metav1.Time{Time: time.Now()}
		h.Status.Claim.Consumer.Name = "m2"
	})
	served("for a host another machine claims", false)
}

// A live node boots its image with its seed on every power-on the provider sends: the window opens
// again for LiveBootWindow after each, and only then.
func TestIPXEWindowOpensAgainForALiveNodesPowerOn(t *testing.T) {
	rebooting := provisioningHost("rebooting", "52:54:00:00:00:01", infrav1.BootMethodPXE, true)
	rebooting.Status.State, rebooting.Status.Claim.Provisioned = infrav1.HostStateProvisioned, true
	rebooting.Status.LiveBootIssuedAt = &metav1.Time{Time: time.Now().Add(-time.Minute)}
	long := provisioningHost("long-ago", "52:54:00:00:00:02", infrav1.BootMethodPXE, true)
	long.Status.State, long.Status.Claim.Provisioned = infrav1.HostStateProvisioned, true
	long.Status.LiveBootIssuedAt = &metav1.Time{Time: time.Now().Add(-LiveBootWindow - time.Minute)}
	ts, _ := world(t, "", rebooting, long)
	dir := Dir(ts.URL, "ns", "m1", token)
	if status, body := get(t, ts.URL+"/v1/ipxe/52:54:00:00:00:01"); status != 200 || !strings.Contains(body, "s="+dir) {
		t.Errorf("a live node powered on a minute ago got %d %q, want its script", status, body)
	}
	if status, body := get(t, ts.URL+"/v1/ipxe/52:54:00:00:00:02"); status != 404 || strings.Contains(body, token) {
		t.Errorf("a live node powered on %s ago got %d %q, want 404 without the token", LiveBootWindow+time.Minute, status, body)
	}
}

// Every replica serves seeds from its own cache, which may lag the API server (and the leader
// whose host controller booted the host): a host the cache shows unclaimed, or not booted yet, is
// read from the API server before its seed is refused. A refusal the API server confirmed is not
// read again for a second (a token or MAC used after its window costs no read per request).
func TestASeedRefusedByALaggingCacheIsAskedOfTheAPIServer(t *testing.T) {
	const mac = "52:54:00:00:00:01"
	ts, c, srv := worldServer(t, "", provisioningHost("h1", mac, infrav1.BootMethodPXE, true))
	nameHost(t, c, "m1", "h1")
	before := provisioningHost("h1", mac, infrav1.BootMethodPXE, false) // the cache: not booted yet
	before.ResourceVersion = "1"
	unclaimed := before.DeepCopy()
	unclaimed.Status.Claim = nil
	lagging := &laggingHosts{Reader: c, view: unclaimed}
	reads := &hostReads{Reader: c}
	now := time.Now()
	srv.Hosts, srv.Reader, srv.clock = lagging, reads, func() time.Time { return now }

	dir := Dir(ts.URL, "ns", "m1", token)
	if status, _ := get(t, dir+"user-data"); status != http.StatusOK {
		t.Errorf("the seed of a host claimed and booted, which a lagging cache shows unclaimed, answered %d, want 200", status)
	}
	lagging.set(before)
	if status, body := get(t, ts.URL+"/v1/ipxe/"+mac); status != http.StatusOK || !strings.Contains(body, "s="+dir) {
		t.Errorf("iPXE for a host booted, which a lagging cache shows not booted yet, answered %d %q, want its script", status, body)
	}

	h := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "h1"}, h); err != nil {
		t.Fatal(err)
	}
	h.Status.BootIssuedAt = nil // the API server refuses too: not booted (yet, again)
	if err := c.Update(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	lagging.set(before)
	n := reads.hosts.Load()
	if status, _ := get(t, ts.URL+"/v1/ipxe/"+mac); status != http.StatusNotFound {
		t.Errorf("iPXE for a host not booted answered %d, want 404", status)
	}
	if got := reads.hosts.Load() - n; got != 1 {
		t.Errorf("the refusal read the host %d times from the API server, want once", got)
	}
	for range 5 {
		get(t, ts.URL+"/v1/ipxe/"+mac)
	}
	if got := reads.hosts.Load() - n; got != 1 {
		t.Errorf("refusals within a second of one the API server confirmed read the host %d times in all, want once", got)
	}
	now = now.Add(refusalRecheck)
	get(t, ts.URL+"/v1/ipxe/"+mac)
	if got := reads.hosts.Load() - n; got != 2 {
		t.Errorf("a refusal a second after the last one confirmed read the host %d times in all, want twice", got)
	}

	// What the cache answers alone costs no read.
	now = now.Add(refusalRecheck) // (no refusal kept)
	n = reads.hosts.Load()
	lagging.set(unclaimed)
	get(t, ts.URL+"/v1/ipxe/"+mac)                                               // no PXE claim in the cache: not meant
	get(t, Dir(ts.URL, "ns", "m1", strings.Repeat("f", len(token)))+"user-data") // a wrong token
	h.Status.BootIssuedAt = &metav1.Time{Time: now}
	if err := c.Update(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	lagging.view = nil
	if status, _ := get(t, dir+"user-data"); status != http.StatusOK {
		t.Errorf("the seed of a host whose claim the cache shows answered %d, want 200", status)
	}
	if got := reads.hosts.Load() - n; got != 0 {
		t.Errorf("requests the cache answers alone read the host %d times from the API server, want none", got)
	}
}

// The host reads refusals take are bounded for all requests together: a rack PXE-looping, or
// tokens used after their window, never spend the seed server's client on them.
func TestHostReadsOfRefusalsAreBounded(t *testing.T) {
	var hosts []*infrav1.RedfishHost
	for i := range 2 * hostReadBurst {
		h := provisioningHost(fmt.Sprintf("h%d", i), fmt.Sprintf("52:54:00:00:01:%02x", i), infrav1.BootMethodPXE, false)
		hosts = append(hosts, h)
	}
	_, c := world(t, "", hosts...)
	reads := &hostReads{Reader: c}
	h := (&Server{Seeds: c, Reader: reads, Hosts: c, IPXERate: 1e6, IPXEBurst: 1e6}).Handler()
	for i := range hosts {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/ipxe/"+hosts[i].Spec.BootMACAddress, nil))
		if w.Code != http.StatusNotFound {
			t.Fatalf("iPXE for a host not booted answered %d, want 404", w.Code)
		}
	}
	// The bucket refills hostReadRate per second while the requests run: allow that much more.
	if got := reads.hosts.Load(); got < hostReadBurst || got > hostReadBurst+2 {
		t.Errorf("%d refusals read hosts %d times from the API server, want %d (the burst)", len(hosts), got, hostReadBurst)
	}
}

// nameHost makes machine's seed name host, as the machine controller writes it.
func nameHost(t *testing.T, c client.Client, machine, host string) {
	t.Helper()
	sec := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: SecretName(machine)}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[KeyHost] = []byte(host)
	if err := c.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
}

// laggingHosts answers the host its view names as the view has it (a cache a watch behind).
type laggingHosts struct {
	client.Reader
	mu   sync.Mutex
	view *infrav1.RedfishHost
}

func (l *laggingHosts) set(h *infrav1.RedfishHost) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.view = h
}

func (l *laggingHosts) stale(h *infrav1.RedfishHost) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.view != nil && l.view.Name == h.Name {
		*h = *l.view.DeepCopy()
	}
}

func (l *laggingHosts) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := l.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if h, ok := obj.(*infrav1.RedfishHost); ok {
		l.stale(h)
	}
	return nil
}

func (l *laggingHosts) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	if hosts, ok := list.(*infrav1.RedfishHostList); ok {
		for i := range hosts.Items {
			l.stale(&hosts.Items[i])
		}
	}
	return nil
}

// hostReads counts the hosts read through it.
type hostReads struct {
	client.Reader
	hosts atomic.Int64
}

func (r *hostReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*infrav1.RedfishHost); ok {
		r.hosts.Add(1)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func provisioningHost(name, mac string, method infrav1.BootMethod, booted bool) *infrav1.RedfishHost {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       infrav1.RedfishHostSpec{BootMACAddress: mac},
		Status: infrav1.RedfishHostStatus{State: infrav1.HostStateProvisioning, Claim: &infrav1.HostClaim{
			Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Namespace: "ns", Name: "m1"}, BootMethod: method,
		}},
	}
	if booted {
		now := metav1.Now()
		h.Status.BootIssuedAt = &now
	}
	return h
}

func TestIPXEScriptOnlyForAHostBootingByPXEWithinItsBootWindow(t *testing.T) {
	ts, _ := world(t, "",
		provisioningHost("pxe", "52:54:00:00:00:01", infrav1.BootMethodPXE, true),
		provisioningHost("http", "52:54:00:00:00:02", infrav1.BootMethodUefiHTTP, true),
		provisioningHost("media", "52:54:00:00:00:03", infrav1.BootMethodVirtualMedia, true),
		provisioningHost("notyet", "52:54:00:00:00:04", infrav1.BootMethodPXE, false),
	)
	dir := Dir(ts.URL, "ns", "m1", token)
	if status, body := get(t, ts.URL+"/v1/ipxe/52:54:00:00:00:01"); status != 200 || body != "#!ipxe\nkernel "+dir+"image ds=nocloud-net;s="+dir+"\nboot\n" {
		t.Errorf("PXE host in its window: %d %q", status, body)
	}
	for mac, why := range map[string]string{
		"52:54:00:00:00:02": "boots by UEFI HTTP", "52:54:00:00:00:03": "boots from virtual media",
		"52:54:00:00:00:04": "has no boot issued yet", "52:54:00:00:00:99": "is unknown",
	} {
		if status, body := get(t, ts.URL+"/v1/ipxe/"+mac); status != 404 || strings.Contains(body, token) {
			t.Errorf("a host that %s got %d %q, want 404 without the token", why, status, body)
		}
	}
}

func TestIPXERequestsAreRateLimitedPerSource(t *testing.T) {
	ts, _ := world(t, "")
	limited := 0
	for range 60 {
		if status, _ := get(t, ts.URL+"/v1/ipxe/52:54:00:00:00:99"); status == http.StatusTooManyRequests {
			limited++
		}
	}
	// A burst of 20 at 5/s: of 60 quick requests, about 40 are refused.
	if limited < 30 {
		t.Errorf("%d of 60 rapid requests from one source refused, want most", limited)
	}
}
