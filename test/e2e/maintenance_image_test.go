package e2e

import (
	"bytes"
	"crypto/tls"
	"maps"
	"net/http"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// resetFromOutside resets a server as something other than the provider would: the BMC's own
// firmware, a person at its web console.
func resetFromOutside(s *simulator.Server, resetType string) {
	GinkgoHelper()
	postFromOutside(s, s.SystemPath()+"/Actions/ComputerSystem.Reset", `{"ResetType":"`+resetType+`"}`)
}

// postFromOutside POSTs an action to a server's Redfish service with its credentials.
func postFromOutside(s *simulator.Server, path, body string) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+path, bytes.NewBufferString(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(s.Credentials())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the fleet's own self-signed simulator.
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(BeNumerically("<", 300), "POST %s answered %s", path, resp.Status)
}

var _ = Describe("A maintenance that boots an image", func() {
	It("runs the image instead of the host's OS, again after a reboot the BMC makes, and hands the host back to the replacement", Label("maintenance-image"), func() {
		b, _ := clusterWithWorkers("mimage", 3, 1)
		machine := b.machines("workers")[0]
		host := b.hostOf(machine)
		server := b.server(host)
		erasures := maps.Clone(server.DriveErasures())
		const image = "http://images.example/fw-updater.iso"
		bootsBefore := len(b.os.Booted(host)) // the live OS's provisioning boot

		// Mode Reuse: the old Machine's Node still exists while the image runs, and the host's disks
		// keep its installed OS: what must not come back mid-work.
		Expect(env.Create(ctx, &expv1.RedfishMaintenance{
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "nic-firmware"},
			Spec: expv1.RedfishMaintenanceSpec{HostName: host, Reason: "NIC firmware by the vendor's updater", Requestor: "fleet-ops",
				Policy: expv1.Enforced, Mode: expv1.Reuse, Tasks: []expv1.MaintenanceTask{{BootImage: &expv1.BootImage{URL: image}}}},
		})).To(Succeed())

		By("the image booted from virtual media with a Continuous override")
		b.waitStage("nic-firmware", expv1.StageInMaintenance)
		Eventually(func() []string { return b.os.Booted(host) }).Should(ContainElement(image))
		enabled, target, _, _ := server.BootOverride()
		Expect([]string{enabled, target}).To(Equal([]string{"Continuous", "Cd"}))
		Expect(slices.Collect(maps.Values(server.Media()))).To(ContainElement(image))

		By("a reboot the BMC makes on its own: the image again, never the installed OS")
		images := len(b.os.Booted(host))
		Eventually(server.PowerState).Should(Equal("On"))
		resetFromOutside(server, "ForceRestart")
		Eventually(func() []string { return b.os.Booted(host) }).Should(HaveLen(images + 1))
		Expect(b.os.Booted(host)[bootsBefore:]).To(Equal([]string{image, image}), "the host's own OS came back mid-work")

		By("completion: the image ejected, the override cleared, the replacement on the same host")
		b.complete("nic-firmware")
		b.waitStage("nic-firmware", expv1.StageCompleted)
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: host}, h)).To(Succeed())
		Expect(h.Status.ServiceBoot).To(BeNil())
		Expect(slices.Collect(maps.Values(server.Media()))).NotTo(ContainElement(image))
		b.waitRunning("workers", 1)
		Expect(b.hostOf(b.machines("workers")[0])).To(Equal(host))
		Expect(server.DriveErasures()).To(Equal(erasures))
		Expect(b.os.Booted(host)[bootsBefore:]).To(Equal([]string{image, image, simos.LiveOS}), "after the image: only the replacement's provisioning boot, of its live OS with its seed")
	})
})
