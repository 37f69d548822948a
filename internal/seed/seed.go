// Package seed serves each machine's bootstrap data to its host in forms real images consume:
// a cloud-init NoCloud-net seed (meta-data, user-data, vendor-data) and an Ignition config, plus
// the provisioning image itself (a redirect), all under a per-claim URL with an unguessable token.
// The token lives only in a Secret owned by the RedfishMachine. The URLs answer 404 once the Node
// joined: a disk image's seed is deleted then; a live image's is kept for its later boots and
// served again only for a while after each power-on the provider sends it (see Servable).
package seed

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// Keys of a seed Secret.
const (
	KeyToken           = "token"
	KeyBootstrapSecret = "bootstrapSecret"
	KeyProviderID      = "providerID"
	KeyHostname        = "hostname"
	KeyInstanceID      = "instanceID"
	KeyImageURL        = "imageURL"
	KeyBootMAC         = "bootMAC"
	// KeyHost names the RedfishHost the seed boots: the seed server serves it only within that
	// host's windows (see Servable).
	KeyHost = "host"
	// Of a disk image (raw, qcow2): what the deploy script writes where.
	KeyImageFormat   = "imageFormat"
	KeyChecksum      = "checksum"
	KeyChecksumType  = "checksumType"
	KeyImageCABundle = "imageCABundle"
	KeyRootSerial    = "rootSerial"
	KeyRootWWN       = "rootWWN"
	// KeyInstallReport is the deploy script's report (install.Report, JSON), written by the seed
	// server when the script POSTs it: the host controller reads it there.
	KeyInstallReport = "installReport"
)

// BootMACIndex indexes RedfishHosts by their lower-case boot MAC (see IndexBootMAC).
const BootMACIndex = "spec.bootMACAddress"

// IndexBootMAC is the field index the iPXE endpoint looks hosts up by.
func IndexBootMAC(o client.Object) []string {
	h, ok := o.(*infrav1.RedfishHost)
	if !ok || h.Spec.BootMACAddress == "" {
		return nil
	}
	return []string{strings.ToLower(h.Spec.BootMACAddress)}
}

// SecretName is the name of the seed Secret of a RedfishMachine.
func SecretName(machine string) string { return machine + "-caprf-seed" }

// NewToken returns 256 random bits, hex encoded.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Dir is the per-claim URL folder: <base>/v1/<namespace>/<machine>/<token>/. A NoCloud-net
// datasource takes it as its seed (`ds=nocloud-net;s=<Dir>`).
func Dir(base, namespace, machine, token string) string {
	return fmt.Sprintf("%s/v1/%s/%s/%s/", strings.TrimSuffix(base, "/"), namespace, machine, token)
}

// ImageURL is the provisioning image URL handed to the BMC: it redirects to the real image, and
// its folder is the seed.
func ImageURL(base, namespace, machine, token string) string {
	return Dir(base, namespace, machine, token) + "image"
}

// CIDataURL is the per-claim NoCloud seed volume (ISO 9660, label cidata) a BMC attaches as a
// second virtual medium next to the OS image.
func CIDataURL(base, namespace, machine, token string) string {
	return Dir(base, namespace, machine, token) + "cidata.iso"
}

// Server answers seed requests.
type Server struct {
	// Seeds reads seed Secrets' metadata (PartialObjectMetadata): a cache that lists only Secrets
	// of SecretType (see CacheOptions), so that a request naming anything else is refused
	// without a request to the API server.
	Seeds client.Reader
	// Reader reads a seed Secret whose metadata Seeds holds (once per version: the token is then
	// checked in memory), the bootstrap data of an authenticated request, and the host of a
	// request that the cache (Hosts) would refuse, before it is refused (see hostAllowing). Give it a client of
	// its own (its own client-side rate limit), not the manager's: nothing a booting host or a
	// flood does can then take the controllers' requests.
	Reader client.Reader
	// Hosts reads RedfishHosts by BootMACIndex (the manager's cache, with the index registered).
	Hosts client.Reader
	// Writer records the deploy script's install report in the seed Secret.
	Writer  client.Writer
	BaseURL string
	// CABundle is the PEM CA bundle that signs this server's certificate: the deploy script
	// trusts it when it reports (nil: the deploy image's own trust store).
	CABundle []byte
	// Rate and Burst limit requests per source address on every path (default 50/s, burst 500:
	// a BMC reads a virtual medium in many range requests, and a rack behind one relay or NAT
	// address boots at once).
	Rate  rate.Limit
	Burst int
	// IPXERate and IPXEBurst limit iPXE requests per source further (default 5/s, burst 20): a
	// MAC is no secret, so the limit is what keeps the token from anyone else on the network.
	IPXERate  rate.Limit
	IPXEBurst int
	// MaxInFlight caps the requests served at once (default 64); more are answered 503 with
	// Retry-After at once.
	MaxInFlight int

	guardOnce sync.Once
	all, ipxe *limiters
	inFlight  chan struct{}

	seedsMu sync.Mutex
	seeds   map[client.ObjectKey]*readSeed // seed Secrets read, by key
	reading singleflight.Group

	volumesMu sync.Mutex
	volumes   map[string]cachedVolume // cidata volumes by seed Secret version

	bootstrapMu sync.Mutex
	bootstrap   map[string]cachedBootstrap // bootstrap data read for authenticated requests, by seed version

	refusedMu     sync.Mutex
	refused       map[refusalKey]time.Time // refusals the API server confirmed (see hostAllowing)
	hostReadsOnce sync.Once
	hostReadLimit *rate.Limiter    // host reads refusals take, all requests together
	clock         func() time.Time // nil: time.Now (tests move it)
}

// cachedBootstrap is a bootstrap data Secret's value and format, kept bootstrapTTL: a BMC reads
// the seed volume in many range requests, each needing the data.
type cachedBootstrap struct {
	value  []byte
	format string
	read   time.Time
}

// bootstrapTTL bounds how long bootstrap data read once is served without reading it again.
const bootstrapTTL = 30 * time.Second

// Handler returns the HTTP handler of the seed server.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/{ns}/{machine}/{token}/{file}", s.serveFile)
	mux.HandleFunc("POST /v1/{ns}/{machine}/{token}/install-report", s.installReport)
	mux.HandleFunc("GET /v1/ipxe/{mac}", s.serveIPXE)
	guarded := s.guard(mux)
	top := http.NewServeMux()
	top.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	top.Handle("/", guarded)
	return top
}

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	ns, machine, token, file := r.PathValue("ns"), r.PathValue("machine"), r.PathValue("token"), r.PathValue("file")
	log := logf.FromContext(r.Context()).WithValues("namespace", ns, "redfishMachine", machine, "file", file)
	sec, err := s.lookup(r.Context(), ns, machine, token)
	if err != nil {
		log.Error(err, "reading seed")
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	if sec == nil {
		http.NotFound(w, r)
		return
	}
	switch file {
	case "image":
		http.Redirect(w, r, string(sec.Data[KeyImageURL]), http.StatusFound)
	case "meta-data":
		w.Header().Set("Content-Type", "text/yaml")
		_, _ = w.Write(metaData(sec))
	case "network-config":
		w.Header().Set("Content-Type", "text/yaml")
		_, _ = w.Write(networkConfig(string(sec.Data[KeyBootMAC])))
	case "cidata.iso":
		data, format, err := s.bootstrapData(r.Context(), sec)
		if err != nil {
			log.Error(err, "reading bootstrap data")
			http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
			return
		}
		if format == "ignition" {
			http.Error(w, "bootstrap data is Ignition: boot by PXE or UefiHttp (ignition.config.url), not from a cidata volume", http.StatusNotFound)
			return
		}
		iso, err := s.volume(sec, data)
		if err != nil {
			log.Error(err, "building the seed volume")
			http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
			return
		}
		log.V(2).Info("served the seed volume") // its content never reaches logs
		w.Header().Set("Content-Type", "application/x-iso9660-image")
		http.ServeContent(w, r, "cidata.iso", time.Time{}, bytes.NewReader(iso))
	case "deploy.iso":
		s.deployVolume(w, r, sec)
	case "vendor-data":
		w.Header().Set("Content-Type", "text/plain")
	case "user-data", "ignition.json":
		data, format, err := s.bootstrapData(r.Context(), sec)
		if err != nil {
			log.Error(err, "reading bootstrap data")
			http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
			return
		}
		if (file == "ignition.json") != (format == "ignition") {
			http.Error(w, "bootstrap data is "+format, http.StatusNotFound)
			return
		}
		log.V(2).Info("served bootstrap data") // the data itself never reaches logs
		_, _ = w.Write(data)
	default:
		http.NotFound(w, r)
	}
}

// volume returns the claim's cidata volume, built once per seed Secret version: BMCs read virtual
// media in many range requests.
func (s *Server) volume(sec *corev1.Secret, userData []byte) ([]byte, error) {
	sum := sha256.Sum256(userData) // the bootstrap data may change while the seed Secret does not
	key := sec.Namespace + "/" + sec.Name + "@" + sec.ResourceVersion + "#" + hex.EncodeToString(sum[:8])
	if iso, ok := s.cached(key); ok {
		return iso, nil
	}
	iso, err := CIDataISO(map[string][]byte{
		"meta-data": metaData(sec), "user-data": userData, "network-config": networkConfig(string(sec.Data[KeyBootMAC])),
	})
	if err != nil {
		return nil, err
	}
	s.keep(key, iso)
	return iso, nil
}

// cached returns the volume kept under key.
func (s *Server) cached(key string) ([]byte, bool) {
	s.volumesMu.Lock()
	defer s.volumesMu.Unlock()
	s.sweepVolumes()
	v, ok := s.volumes[key]
	return v.iso, ok
}

// keep keeps a volume under key for volumeTTL (at most maxVolumes of them).
func (s *Server) keep(key string, iso []byte) {
	s.volumesMu.Lock()
	defer s.volumesMu.Unlock()
	if s.volumes == nil {
		s.volumes = map[string]cachedVolume{}
	}
	s.sweepVolumes()
	for k := range s.volumes {
		if len(s.volumes) < maxVolumes {
			break
		}
		delete(s.volumes, k)
	}
	s.volumes[key] = cachedVolume{iso: iso, built: time.Now()}
}

// sweepVolumes forgets volumes older than volumeTTL: they hold bootstrap data, needed only while
// a host boots. Caller holds volumesMu.
func (s *Server) sweepVolumes() {
	for k, v := range s.volumes {
		if time.Since(v.built) >= volumeTTL {
			delete(s.volumes, k)
		}
	}
}

// Limits of the cidata volume cache.
const (
	volumeTTL  = 10 * time.Minute
	maxVolumes = 32
)

type cachedVolume struct {
	iso   []byte
	built time.Time
}

// metaData is the NoCloud meta-data of a claim. For an image installed to disk it names the root
// drive the claim chose (root-device-serial, root-device-wwn): a self-installing ISO's config can
// take its install target from there (cloud-init jinja: {{ ds.meta_data.root_device_serial }}).
func metaData(sec *corev1.Secret) []byte {
	b := fmt.Appendf(nil, "instance-id: %s\nlocal-hostname: %s\nprovider-id: %s\n",
		sec.Data[KeyInstanceID], sec.Data[KeyHostname], sec.Data[KeyProviderID])
	if v := sec.Data[KeyRootSerial]; len(v) > 0 {
		b = fmt.Appendf(b, "root-device-serial: %q\n", v)
	}
	if v := sec.Data[KeyRootWWN]; len(v) > 0 {
		b = fmt.Appendf(b, "root-device-wwn: %q\n", v)
	}
	return b
}

// bootstrapData reads the bootstrap data a seed Secret names, kept for that seed's version (a
// machine recreated under the same name has a seed of its own, never the old one's data).
func (s *Server) bootstrapData(ctx context.Context, seed *corev1.Secret) ([]byte, string, error) {
	name := string(seed.Data[KeyBootstrapSecret])
	key := string(seed.UID) + "@" + seed.ResourceVersion + "/" + name
	s.bootstrapMu.Lock()
	if b, ok := s.bootstrap[key]; ok && time.Since(b.read) < bootstrapTTL {
		s.bootstrapMu.Unlock()
		return b.value, b.format, nil
	}
	s.bootstrapMu.Unlock()
	sec := &corev1.Secret{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: seed.Namespace, Name: name}, sec); err != nil {
		return nil, "", err
	}
	format := string(sec.Data["format"])
	if format == "" {
		format = "cloud-config"
	}
	s.bootstrapMu.Lock()
	defer s.bootstrapMu.Unlock()
	if s.bootstrap == nil {
		s.bootstrap = map[string]cachedBootstrap{}
	}
	for k, b := range s.bootstrap {
		if time.Since(b.read) >= bootstrapTTL {
			delete(s.bootstrap, k)
		}
	}
	s.bootstrap[key] = cachedBootstrap{value: sec.Data["value"], format: format, read: time.Now()}
	return sec.Data["value"], format, nil
}

// LiveBootWindow is how long after the provider recorded a boot of a provisioned live host's image
// (status.liveBootIssuedAt) its seed is served again, the iPXE script included: the BMC fetches the
// media, the firmware POSTs (minutes on a large server), cloud-init reads the seed.
const LiveBootWindow = 20 * time.Minute

// ipxeWindow says whether the iPXE endpoint answers for h now: from the moment its provisioning
// boot was issued until its Node joined, and for LiveBootWindow after each later power-on of its
// live image.
func ipxeWindow(h *infrav1.RedfishHost, now time.Time) bool {
	c := h.Status.Claim
	switch {
	case c == nil || c.Release:
		return false
	case !c.Provisioned:
		return h.Status.State == infrav1.HostStateProvisioning && h.Status.BootIssuedAt != nil
	}
	return liveBootWindow(h, now)
}

// liveBootWindow says whether now is within LiveBootWindow of the last boot the provider recorded
// for h's live image (a minute of clock skew between replicas allowed before it).
func liveBootWindow(h *infrav1.RedfishHost, now time.Time) bool {
	at := h.Status.LiveBootIssuedAt
	return at != nil && !now.Before(at.Add(-time.Minute)) && now.Sub(at.Time) < LiveBootWindow
}

// Servable says whether the seed of machine, booting host h, is served now: while h's claim by
// machine provisions (until its Node joined), then only for LiveBootWindow after each power-on
// the provider sent its live image (a live image's seed is kept for those; a disk image's is
// deleted at the join). Never for a host another machine claims, or none.
func Servable(h *infrav1.RedfishHost, machine string, now time.Time) bool {
	c := h.Status.Claim
	switch {
	case c == nil || c.Consumer.Name != machine || c.Release:
		return false
	case !c.Provisioned:
		return true
	}
	return liveBootWindow(h, now)
}

// serveIPXE answers a network-booting host (PXE chained to iPXE) by its boot MAC with a script
// that boots the image with the NoCloud seed on the kernel command line. It answers only for a
// host whose claim boots by PXE, from the moment its boot was issued until its Node joined, and
// for a while after each power-on the provider sent a live node (see ipxeWindow); 404 otherwise,
// without saying why. Requests are rate-limited per
// source address: a MAC is no secret (it is in the host's spec and status), so the window and the
// limit are what keep the token from anyone else on the provisioning network.
func (s *Server) serveIPXE(w http.ResponseWriter, r *http.Request) {
	if !s.ipxe.allow(r) {
		tooMany(w)
		return
	}
	mac := strings.ToLower(r.PathValue("mac"))
	hosts := &infrav1.RedfishHostList{}
	if err := s.Hosts.List(r.Context(), hosts, client.MatchingFields{BootMACIndex: mac}); err != nil {
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	// The cache's answer first, for every host with the MAC; then the API server's (see hostAllowing).
	inWindow := func(h *infrav1.RedfishHost) bool {
		c := h.Status.Claim
		return c != nil && c.BootMethod == infrav1.BootMethodPXE && ipxeWindow(h, s.now())
	}
	var h *infrav1.RedfishHost
	for i := range hosts.Items {
		if inWindow(&hosts.Items[i]) {
			h = &hosts.Items[i]
			break
		}
	}
	for i := 0; h == nil && i < len(hosts.Items); i++ {
		var err error
		if h, err = s.hostAllowing(r.Context(), client.ObjectKeyFromObject(&hosts.Items[i]), &hosts.Items[i], refusalPurpose{ipxe: true}, inWindow); err != nil {
			http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
			return
		}
	}
	if h == nil {
		http.NotFound(w, r)
		return
	}
	c := h.Status.Claim
	sec, err := s.seed(r.Context(), h.Namespace, c.Consumer.Name)
	if err != nil {
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	if sec == nil {
		http.NotFound(w, r)
		return
	}
	_, format, err := s.bootstrapData(r.Context(), sec)
	if err != nil {
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	dir := Dir(s.BaseURL, h.Namespace, c.Consumer.Name, string(sec.Data[KeyToken]))
	w.Header().Set("Content-Type", "text/plain")
	if format == "ignition" {
		// Fedora CoreOS and Flatcar first-boot arguments.
		fmt.Fprintf(w, "#!ipxe\nkernel %simage ignition.firstboot flatcar.first_boot=1 ignition.platform.id=metal ignition.config.url=%signition.json\nboot\n", dir, dir)
		return
	}
	fmt.Fprintf(w, "#!ipxe\nkernel %simage ds=nocloud-net;s=%s\nboot\n", dir, dir)
}

// Serve runs the seed server on l until ctx ends: idle connections closed after a minute, slow
// ones after the timeouts below, and the HTTP server's own errors (TLS handshakes a scanner or a
// client without the CA failed) logged at V(1). The number of connections is not capped here: a
// cap shared by all lets whoever holds that many connections open lock every host out.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	log := logf.FromContext(ctx).WithName("seed-server")
	srv := &http.Server{
		Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 5 * time.Minute, IdleTimeout: time.Minute,
		ErrorLog: stdlog.New(logWriter{log}, "", 0),
	}
	go s.sweep(ctx)
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// sweep forgets what the caches hold past its time (tokens, bootstrap data, volumes) even when
// no request comes to replace it, until ctx ends.
func (s *Server) sweep(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.sweepNow()
	}
}

func (s *Server) sweepNow() {
	s.volumesMu.Lock()
	s.sweepVolumes()
	s.volumesMu.Unlock()
	s.bootstrapMu.Lock()
	for k, b := range s.bootstrap {
		if time.Since(b.read) >= bootstrapTTL {
			delete(s.bootstrap, k)
		}
	}
	s.bootstrapMu.Unlock()
	s.refusedMu.Lock()
	for k, at := range s.refused {
		if s.now().Sub(at) >= refusalRecheck {
			delete(s.refused, k)
		}
	}
	s.refusedMu.Unlock()
	s.seedsMu.Lock()
	for k, v := range s.seeds {
		if time.Since(v.read) >= seedTTL {
			delete(s.seeds, k)
		}
	}
	s.seedsMu.Unlock()
}
