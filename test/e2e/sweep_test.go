package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/provider"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// The secrets sweep: every spec of the suite runs with marked secrets, and whatever the provider
// says is searched for them. Marked: every BMC password (the beds' fleets, and the passwords specs
// rotate to) and image-server password carries sweepMarker; every bootstrap data value begins
// with "#cloud-config for " (sample.BootstrapData); and every seed token written during the run
// is collected from the seed Secrets. Searched: the manager's log at its most verbose level (as the
// release's logger writes it, klog's included), every event, every object of ours and CAPI's Machines and
// Clusters as each version is written (status, conditions, annotations), and the metrics at the
// end; and every request the beds' BMCs received outside those that must carry a secret (see
// sweepBMCRequest). The suite fails if any marker is found (AfterSuite).
const sweepMarker = "Sw33pMarker"

var sweepStatic = withBase64(sweepMarker, "#cloud-config for ")

// withBase64 is the markers and what base64 makes of them (a log encodes a []byte value so, as a
// Secret's data is): standard and URL alphabets, at each of the three offsets a marker can start
// at in the encoded bytes, without the characters its neighbours share.
func withBase64(markers ...string) []string {
	out := append([]string(nil), markers...)
	for _, m := range markers {
		for offset := range 3 {
			enc := base64.StdEncoding.EncodeToString(append(make([]byte, offset), m...))
			start, end := (4*offset+2)/3, 8*(offset+len(m))/6
			out = append(out, enc[start:end], strings.NewReplacer("+", "-", "/", "_").Replace(enc[start:end]))
		}
	}
	return out
}

// hex64 finds what could be a seed token (64 hex digits); image checksums look the same, so a
// match counts only when it is a token the run wrote.
var hex64 = regexp.MustCompile(`[0-9a-fA-F]{64}`)

type sweeper struct {
	mu      sync.Mutex
	scanned map[string]int    // sink -> texts searched
	hits    []string          // what was found, where
	hex     map[string]string // 64-hex strings seen in the sinks -> where, first
	tokens  map[string]bool   // the seed tokens written
	hexFull bool              // more 64-hex strings were seen than hex holds: the token check is incomplete
}

// maxHex bounds the 64-hex strings kept (checksums and tokens: a few thousand in a run).
const maxHex = 1 << 20

var sweep = &sweeper{scanned: map[string]int{}, hex: map[string]string{}, tokens: map[string]bool{}}

func (s *sweeper) scan(sink, where, text string) {
	var found []string
	for _, m := range sweepStatic {
		if strings.Contains(text, m) {
			found = append(found, m)
		}
	}
	hexes := hex64.FindAllString(text, -1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scanned[sink]++
	for _, m := range found {
		if len(s.hits) < 50 {
			s.hits = append(s.hits, fmt.Sprintf("%s %s: %q in %.400s", sink, where, m, text))
		}
	}
	for _, h := range hexes {
		if _, ok := s.hex[strings.ToLower(h)]; !ok {
			if len(s.hex) >= maxHex {
				s.hexFull = true
				continue
			}
			s.hex[strings.ToLower(h)] = sink + " " + where
		}
	}
}

// logWriter is the manager's log output: each entry searched, and written on to GinkgoWriter
// with E2E_LOGS set.
type logWriter struct{ next io.Writer }

func (w logWriter) Write(p []byte) (int, error) {
	sweep.scan("log", "", string(p))
	if w.next != nil {
		return w.next.Write(p)
	}
	return len(p), nil
}

// sweptLogger logs at the most verbose level the manager allows (provider.MaxLogVerbosity),
// JSON-encoded (the release's klog text format writes the same values; a []byte in base64 in
// both, which the markers' base64 forms catch). klog's own verbosity is raised to the same level
// (klogVerbosity), for what logs through klog rather than a context's logger.
func sweptLogger() zap.Opts {
	var next io.Writer
	if os.Getenv("E2E_LOGS") != "" {
		next = GinkgoWriter
	}
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	Expect(fs.Set("v", strconv.Itoa(provider.MaxLogVerbosity))).To(Succeed())
	return func(o *zap.Options) {
		o.DestWriter = logWriter{next: next}
		o.Development = false
		o.Level = zapcore.Level(-provider.MaxLogVerbosity)
	}
}

// startSweep watches the events and objects the run writes, and the seed Secrets' tokens.
func startSweep(ctx context.Context) {
	GinkgoHelper()
	// Stopped before the API server is (cleanups run last first): open watches would hold it up.
	ctx, cancel := context.WithCancel(ctx)
	DeferCleanup(cancel)
	c, err := cache.New(env.Config, cache.Options{Scheme: testenv.Scheme(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Field: fields.OneTermEqualSelector("type", string(seed.SecretType))},
	}})
	Expect(err).NotTo(HaveOccurred())
	// (Events are read through the core API only: events.k8s.io serves the same objects.)
	for name, obj := range map[string]client.Object{
		"Event": &corev1.Event{}, "RedfishHost": &infrav1.RedfishHost{}, "RedfishMachine": &infrav1.RedfishMachine{},
		"RedfishCluster": &infrav1.RedfishCluster{}, "RedfishJob": &infrav1.RedfishJob{}, "RedfishRemediation": &infrav1.RedfishRemediation{},
		"RedfishMaintenance": &expv1.RedfishMaintenance{}, "RedfishMaintenancePolicy": &expv1.RedfishMaintenancePolicy{},
		"RedfishMaintenanceSet": &expv1.RedfishMaintenanceSet{}, "Machine": &clusterv1.Machine{}, "Cluster": &clusterv1.Cluster{},
	} {
		inf, err := c.GetInformer(ctx, obj)
		Expect(err).NotTo(HaveOccurred())
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { sweepObject(name, o) },
			UpdateFunc: func(_, o any) { sweepObject(name, o) },
		})
		Expect(err).NotTo(HaveOccurred())
	}
	secrets, err := c.GetInformer(ctx, &corev1.Secret{})
	Expect(err).NotTo(HaveOccurred())
	token := func(o any) {
		if s, ok := o.(*corev1.Secret); ok && len(s.Data[seed.KeyToken]) > 0 {
			sweep.mu.Lock()
			sweep.tokens[strings.ToLower(string(s.Data[seed.KeyToken]))] = true
			sweep.mu.Unlock()
		}
	}
	_, err = secrets.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: token, UpdateFunc: func(_, o any) { token(o) }})
	Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()
	Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
}

// systemResource is a ComputerSystem's path (a PATCH of it sets the boot override, which may
// name the seed URL).
var systemResource = regexp.MustCompile(`/Systems/[^/]+$`)

// sweepBMCRequest searches what the provider sent a BMC, outside the requests that must carry a
// secret: a login (the BMC password), a firmware update (the image server's credentials), a media
// insert or a boot override (the seed URL, with its token).
func sweepBMCRequest(r simulator.Request) {
	path, _, _ := strings.Cut(r.Path, "?")
	path = strings.TrimSuffix(path, "/")
	switch {
	case r.Method == "POST" && (strings.HasSuffix(path, "/Sessions") || strings.HasSuffix(path, "SimpleUpdate") || strings.HasSuffix(path, "InsertMedia")),
		r.Method == "PATCH" && (strings.Contains(path, "/VirtualMedia/") || systemResource.MatchString(path)):
		return
	}
	sweep.scan("bmc-requests", r.Method+" "+path, r.Method+" "+r.Path+" "+fmt.Sprint(r.Header)+" "+string(r.Body))
}

func sweepObject(kind string, o any) {
	shared, ok := o.(client.Object)
	if !ok {
		return
	}
	obj := shared.DeepCopyObject().(client.Object) // the informer's copy is shared: never changed
	obj.SetManagedFields(nil)
	b, err := json.Marshal(obj)
	if err != nil {
		return
	}
	sweep.scan(kind, obj.GetNamespace()+"/"+obj.GetName(), string(b))
}

var _ = AfterSuite(func() {
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sweep.scan("metrics", f.GetName(), f.GetName()+"{"+strings.Join(labels, ",")+"}")
		}
	}
	sweep.mu.Lock()
	defer sweep.mu.Unlock()
	hits := append([]string(nil), sweep.hits...)
	for tok := range sweep.tokens {
		if where, ok := sweep.hex[tok]; ok {
			hits = append(hits, "a seed token in "+where)
		}
	}
	var counts []string
	for sink, n := range sweep.scanned {
		counts = append(counts, fmt.Sprintf("%s %d", sink, n))
	}
	sort.Strings(counts)
	AddReportEntry("secrets-sweep", fmt.Sprintf("searched for %d markers and %d seed tokens: %s; found %d",
		len(sweepStatic), len(sweep.tokens), strings.Join(counts, ", "), len(hits)))
	for _, sink := range []string{"log", "bmc-requests", "Event", "RedfishHost", "RedfishMachine", "Machine", "metrics"} {
		Expect(sweep.scanned[sink]).To(BeNumerically(">", 0), "the sweep searched nothing in %s: it proves nothing there", sink)
	}
	Expect(sweep.hexFull).To(BeFalse(), "more 64-hex strings than the sweep keeps: seed tokens may have gone unseen")
	for _, h := range hits {
		fmt.Fprintln(GinkgoWriter, "secret found:", h)
	}
	Expect(len(hits)).To(BeZero(), "secrets found where nobody may read them (listed above): %.2000s", strings.Join(hits, "\n"))
})

// recovering keeps the suite alive when a log entry cannot be encoded: controller-runtime's
// priority queue logs, at V(5), items holding a nil *time.Time, which zap's reflected JSON encoder
// panics on (in a goroutine of the queue: the whole suite died of it). The entry is dropped, so
// nothing of it reaches the sweep's sinks either.
type recovering struct{ logr.LogSink }

func (r recovering) Info(level int, msg string, kv ...any) {
	defer func() { _ = recover() }()
	r.LogSink.Info(level, msg, kv...)
}

func (r recovering) Error(err error, msg string, kv ...any) {
	defer func() { _ = recover() }()
	r.LogSink.Error(err, msg, kv...)
}

func (r recovering) WithValues(kv ...any) logr.LogSink {
	return recovering{r.LogSink.WithValues(kv...)}
}

func (r recovering) WithName(name string) logr.LogSink { return recovering{r.LogSink.WithName(name)} }
