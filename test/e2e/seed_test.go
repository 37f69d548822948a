package e2e

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// How a prebuilt image gets its per-claim seed. The simulated OS finds it only as a real one
// could: on the media the BMC attached, or on the kernel command line it was booted with.
var _ = Describe("Seed delivery", func() {
	It("attaches a cidata volume next to the OS image for VirtualMedia, and the OS reads its seed from that volume", Label("seed-volume"), func() {
		b := newBed("seedvol", 1, nil)
		b.waitHostsAvailable(1)
		server := b.fleet.Servers[0]
		var mu sync.Mutex
		var media map[string]string
		server.OnBoot(func(e simulator.BootEvent) {
			mu.Lock()
			defer mu.Unlock()
			if e.Target == "Cd" {
				media = e.Media
			}
		})
		b.createCluster("seedvol")
		b.controlPlane()
		mu.Lock()
		defer mu.Unlock()
		Expect(b.os.Fetched()[server.ID()]).To(Equal([]string{"#cloud-config for the control plane\n"}))
		Expect(media).To(HaveLen(2), "the OS image and the seed volume")
		Expect(media["CD1"]).To(HaveSuffix("/image"))
		Expect(media["USB1"]).To(HaveSuffix("/cidata.iso"))

		By("the volume answering 404 once the Node joined, though the live node's seed Secret is kept for its next boot")
		Expect(httpStatusOf(media["USB1"])).To(Equal(http.StatusNotFound))
	})

	It("refuses VirtualMedia on a BMC with a single virtual media device, naming PXE and UefiHttp", Label("seed-volume"), func() {
		b := startBed("onemedia", 1, bedOptions{withOS: true, fleet: simulator.FleetOptions{SingleMediaSlot: true}})
		b.waitHostsAvailable(1)
		b.createCluster("onemedia")
		data, rm, m := sample.ControlPlane(b.ns, b.cluster.Name, b.ns+"-cp")
		for _, o := range []client.Object{data, rm, m} {
			Expect(env.Create(ctx, o)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			h := &infrav1.RedfishHost{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: b.fleet.Servers[0].ID()}, h)).To(Succeed())
			c := findCondition(h.Status.Conditions, infrav1.BootPreparedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(infrav1.NoSeedMediaSlotReason))
			g.Expect(c.Message).To(And(ContainSubstring("PXE"), ContainSubstring("UefiHttp")))
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(rm), rm)).To(Succeed())
			ready := findCondition(rm.Status.Conditions, infrav1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Message).To(ContainSubstring("cannot boot: This BMC offers a single virtual media device"))
		}).Should(Succeed())
		Expect(b.fleet.Servers[0].Stats().Boots).To(BeZero(), "the host was booted without its seed")
	})

	It("boots UEFI HTTP hosts from the per-claim boot URI with the seed on a cidata volume in the BMC's virtual media, a single-slot BMC included", Label("seed-uefi-http"), func() {
		b := startBed("seedhttp", 1, bedOptions{withOS: true, fleet: simulator.FleetOptions{SingleMediaSlot: true}})
		b.waitHostsAvailable(1)
		b.createCluster("seedhttp")
		var mu sync.Mutex
		var boots []simulator.BootEvent
		b.fleet.Servers[0].OnBoot(func(e simulator.BootEvent) {
			mu.Lock()
			defer mu.Unlock()
			boots = append(boots, e)
		})
		b.template("http", infrav1.RedfishMachineSpec{BootMethod: infrav1.BootMethodUefiHTTP})
		b.machineDeployment("http", "http", 1)
		b.waitRunning("http", 1)
		mu.Lock()
		defer mu.Unlock()
		Expect(boots).To(HaveLen(1))
		Expect(boots[0].Target).To(Equal("UefiHttp"))
		Expect(boots[0].HTTPBootURI).To(HaveSuffix("/image"))
		Expect(boots[0].Media).To(HaveLen(1), "the seed volume in the only virtual media device")
		for _, url := range boots[0].Media {
			Expect(url).To(HaveSuffix("/cidata.iso"))
		}
		Expect(b.os.Fetched()[b.fleet.Servers[0].ID()]).To(Equal([]string{"#cloud-config for http\n"}))
		Eventually(func(g Gomega) {
			for slot, url := range b.fleet.Servers[0].Media() {
				g.Expect(url).To(BeEmpty(), "the seed volume stays in %s after the Node joined", slot)
			}
		}).Should(Succeed())
	})

	It("boots PXE hosts with the seed on the kernel command line, UEFI HTTP hosts from the per-claim URI and VirtualMedia hosts from the seed volume, every URL over the seed server's HTTPS, and refuses the iPXE script to a host that does not boot by PXE", Label("seed-pxe", "seed-tls"), func() {
		b := newBed("seedpxe", 4, nil)
		b.waitHostsAvailable(4)
		b.createCluster("seedpxe")
		var mu sync.Mutex
		var cmdlines, urls []string
		for _, s := range b.fleet.Servers {
			s.OnBoot(func(e simulator.BootEvent) {
				mu.Lock()
				defer mu.Unlock()
				if e.Target == "Pxe" {
					cmdlines = append(cmdlines, e.KernelCmdline)
				}
				for _, u := range e.Media {
					if u != "" {
						urls = append(urls, u)
					}
				}
				if e.HTTPBootURI != "" {
					urls = append(urls, e.HTTPBootURI)
				}
			})
		}
		b.controlPlane() // VirtualMedia
		b.template("pxe", infrav1.RedfishMachineSpec{BootMethod: infrav1.BootMethodPXE})
		b.template("http", infrav1.RedfishMachineSpec{BootMethod: infrav1.BootMethodUefiHTTP})
		b.machineDeployment("pxe", "pxe", 1)
		b.machineDeployment("http", "http", 1)
		b.waitRunning("pxe", 1)
		b.waitRunning("http", 1)
		mu.Lock()
		defer mu.Unlock()
		Expect(cmdlines).To(HaveLen(1))
		Expect(cmdlines[0]).To(MatchRegexp(`^ds=nocloud-net;s=https://\S+/v1/` + b.ns + `/\S+/[0-9a-f]{64}/$`))
		Expect(urls).To(HaveLen(4), "the control plane's image and seed volume, the UEFI HTTP host's boot URI and seed volume")
		for _, u := range urls {
			Expect(u).To(HavePrefix(seedBaseURL+"/v1/"+b.ns+"/"), "every boot fetches from the seed server over HTTPS")
		}
		Expect(b.os.Fetched()[b.hostOf(b.machines("pxe")[0])]).To(Equal([]string{"#cloud-config for pxe\n"}))
		Expect(b.os.Fetched()[b.hostOf(b.machines("http")[0])]).To(Equal([]string{"#cloud-config for http\n"}))

		By("serving nothing in clear text, and nothing to a client that does not trust the seed server's certificate")
		plain := "http://" + strings.TrimPrefix(seedBaseURL, "https://")
		Expect(httpStatusOf(plain + "/healthz")).To(Equal(http.StatusBadRequest))         // Go's TLS server: "client sent an HTTP request to an HTTPS server"
		_, err := (&http.Client{Timeout: 10 * time.Second}).Get(seedBaseURL + "/healthz") //nolint:noctx // a test probe.
		Expect(err).To(MatchError(ContainSubstring("certificate")))

		By("asking for the iPXE script of a host that boots by UEFI HTTP while it provisions")
		for _, s := range b.fleet.Servers {
			s.Fault.Latency(500 * time.Millisecond) // a slow BMC keeps the boot window open a while
		}
		b.machineDeployment("http2", "http", 1)
		var httpHost *infrav1.RedfishHost
		Eventually(func(g Gomega) {
			for _, h := range b.hosts() {
				if c := h.Status.Claim; c != nil && c.BootMethod == infrav1.BootMethodUefiHTTP && h.Status.State == infrav1.HostStateProvisioning && h.Status.BootIssuedAt != nil {
					httpHost = &h
				}
			}
			g.Expect(httpHost).NotTo(BeNil())
		}, time.Minute, 50*time.Millisecond).Should(Succeed())
		Expect(httpStatusOf(seedBaseURL + "/v1/ipxe/" + httpHost.Spec.BootMACAddress)).To(Equal(http.StatusNotFound))
		b.waitRunning("http2", 1)
	})
})

func httpStatusOf(url string) int {
	GinkgoHelper()
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: seedCAs, MinVersion: tls.VersionTLS12}}}
	resp, err := c.Get(url) //nolint:noctx // a test probe.
	Expect(err).NotTo(HaveOccurred())
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
