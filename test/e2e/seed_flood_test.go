package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

// The seed server answers unauthenticated requests from anyone on the provisioning network. A
// flood of them (wrong tokens for the machines being provisioned, seeds that do not exist, iPXE
// scripts by MAC) from many source addresses must not slow down the hosts that provision
// meanwhile: those requests are refused from memory, and the seed server's own reads go through
// a client whose rate limit is not the controllers'.
var _ = Describe("Seed server under a flood", func() {
	It("provisions a host as fast while the seed server is flooded from 256 addresses as without the flood", Label("seed-flood"), func() {
		b := newBed("seedflood", 5, nil)
		b.waitHostsAvailable(5)
		b.createCluster("seedflood")
		b.controlPlane()
		b.template("w", infrav1.RedfishMachineSpec{})

		timeToRunning := func(md string) time.Duration {
			start := time.Now()
			b.machineDeployment(md, "w", 1)
			Eventually(func(g Gomega) {
				ms := b.machines(md)
				g.Expect(ms).To(HaveLen(1))
				g.Expect(ms[0].Status.NodeRef.IsDefined()).To(BeTrue())
			}, 3*time.Minute, 20*time.Millisecond).Should(Succeed())
			return time.Since(start)
		}

		// Each measured twice, the faster kept: one host's provisioning is a few seconds, and a
		// two-core machine running the rest of the suite stalls one of them now and then whatever
		// the seed server does.
		quiet := min(timeToRunning("quiet-1"), timeToRunning("quiet-2"))

		f := startSeedFlood(b.ns, b.hosts())
		flooded := min(timeToRunning("flooded-1"), timeToRunning("flooded-2"))
		stats := f.stop()

		ratio := float64(flooded) / float64(quiet)
		AddReportEntry("seed-flood", fmt.Sprintf("provisioning %v quiet, %v flooded (ratio %.2f); flood: %s", quiet.Round(time.Millisecond), flooded.Round(time.Millisecond), ratio, stats))
		GinkgoWriter.Printf("seed-flood: provisioning %v quiet, %v flooded (ratio %.2f); flood: %s\n", quiet, flooded, ratio, stats)
		Expect(stats.sent).To(BeNumerically(">", 1000), "the flood sent too little to prove anything")
		Expect(b.os.Errors()).To(BeEmpty())
		Expect(ratio).To(BeNumerically("<=", 1.2), "provisioning under the flood took more than 20%% longer")
	})
})

// seedFlood sends requests to the seed server from 256 loopback source addresses until stopped.
type seedFlood struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	start    time.Time
	sent     atomic.Int64
	byStatus sync.Map // int -> *atomic.Int64
}

type floodStats struct {
	sent     int64
	rate     float64
	byStatus map[int]int64
}

func (s floodStats) String() string {
	return fmt.Sprintf("%d requests (%.0f/s), answers %v", s.sent, s.rate, s.byStatus)
}

func startSeedFlood(ns string, hosts []infrav1.RedfishHost) *seedFlood {
	ctx, cancel := context.WithCancel(context.Background())
	f := &seedFlood{cancel: cancel, start: time.Now()}
	for worker := range floodWorkers {
		f.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				source := net.IPv4(127, 0, byte(1+worker%16), byte(2+i%16)) // 256 addresses
				f.send(ctx, source, f.path(ctx, ns, hosts, i))
			}
		})
	}
	return f
}

// path picks what an attacker on the provisioning network would ask for: a wrong token for a
// RedfishMachine being provisioned (names are no secret), a seed that does not exist, or the
// iPXE script of a host's MAC.
func (f *seedFlood) path(ctx context.Context, ns string, hosts []infrav1.RedfishHost, i int) string {
	token := fmt.Sprintf("%064x", i)
	switch i % 3 {
	case 0:
		rms := &infrav1.RedfishMachineList{}
		if i%64 == 0 && env.List(ctx, rms, client.InNamespace(ns)) == nil && len(rms.Items) > 0 {
			return seed.Dir(seedBaseURL, ns, rms.Items[len(rms.Items)-1].Name, token) + "cidata.iso"
		}
		return seed.Dir(seedBaseURL, ns, fmt.Sprintf("flooded-%d", i%7), token) + "user-data"
	case 1:
		return seed.Dir(seedBaseURL, ns, fmt.Sprintf("nothing-%d", i), token) + "meta-data"
	default:
		return seedBaseURL + "/v1/ipxe/" + hosts[i%len(hosts)].Spec.BootMACAddress
	}
}

var floodClients sync.Map // source address -> *http.Client

func (f *seedFlood) send(ctx context.Context, source net.IP, url string) {
	c, ok := floodClients.Load(source.String())
	if !ok {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: source}, Timeout: 5 * time.Second}
		c, _ = floodClients.LoadOrStore(source.String(), &http.Client{
			Timeout: 5 * time.Second,
			Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4,
				TLSClientConfig: &tls.Config{RootCAs: seedCAs, MinVersion: tls.VersionTLS12}},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := c.(*http.Client).Do(req)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	f.sent.Add(1)
	n, _ := f.byStatus.LoadOrStore(resp.StatusCode, &atomic.Int64{})
	n.(*atomic.Int64).Add(1)
}

func (f *seedFlood) stop() floodStats {
	f.cancel()
	f.wg.Wait()
	s := floodStats{sent: f.sent.Load(), rate: float64(f.sent.Load()) / time.Since(f.start).Seconds(), byStatus: map[int]int64{}}
	f.byStatus.Range(func(k, v any) bool {
		s.byStatus[k.(int)] = v.(*atomic.Int64).Load()
		return true
	})
	return s
}

// floodWorkers is how many requests the flood keeps in flight.
const floodWorkers = 128
