package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenanceset"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
)

// slowImageServer serves firmware images slowly, a chunk at a time over delay: a multipart push
// through the provider streams for that long while the BMC receives it and lists no task yet.
func slowImageServer(delay time.Duration) *httptest.Server {
	const chunks = 8
	chunk := []byte(strings.Repeat("firmware", 128))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(chunks*len(chunk)))
		for range chunks {
			select {
			case <-time.After(delay / chunks):
			case <-r.Context().Done():
				return
			}
			_, _ = w.Write(chunk)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}))
	DeferCleanup(srv.Close)
	return srv
}

var _ = Describe("One flash at a time per host", func() {
	It("lets two maintenances and a RedfishJob racing for one host flash it once each, one after the other, with no boot while an image is pushed or applied, and a timed-out one's flash waited out; a paused host's BMC gets nothing; an image-server password a BMC echoes appears nowhere; a BMC-only update waits for a settled host; a deleted image maintenance hands its host back off and ejected; a set stops at maxFailures",
		Label("flash-exclusive", "flash-timeout-exclusive", "host-paused-maintenance", "image-credentials-masked", "bmc-only-settled", "withdraw-safe", "default-budget-failed"), func() {
			// supermicro-x13 takes images only pushed (multipart): the push runs for seconds before
			// the BMC lists a task. dmtf pulls them (SimpleUpdate) with the image server's credentials.
			b := profileBed("flashlease", 5, []string{"supermicro-x13", "dmtf", "dmtf", "dmtf", "dmtf"}, false)
			b.waitHostsAvailable(5)
			var pushed string
			var dmtf []string
			for _, h := range b.hosts() {
				if h.Labels[profileLabel] == "supermicro-x13" {
					pushed = h.Name
				} else {
					dmtf = append(dmtf, h.Name)
				}
			}
			slices.Sort(dmtf)
			Expect(dmtf).To(HaveLen(4))
			pulled, fleetHosts := dmtf[0], dmtf[1:]
			srv := b.serverOf(pushed)
			images := slowImageServer(3 * time.Second)
			before := srv.Stats()

			By("two BIOS maintenances and a job created at once on the pushed host")
			b.firmwareMaintenance("bios-a", pushed, 0, biosPlan(images.URL, "2.0"))
			b.firmwareMaintenance("bios-b", pushed, 0, biosPlan(images.URL, "2.1"))
			Expect(env.Create(ctx, &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "setup-boot"},
				Spec: infrav1.RedfishJobSpec{HostName: pushed, Tasks: []infrav1.JobTask{{Power: infrav1.JobPowerForceOff}, {BootOnce: "BiosSetup"}, {Power: infrav1.JobPowerOn}, {Power: infrav1.JobPowerForceOff}}}})).To(Succeed())
			for _, name := range []string{"bios-a", "bios-b"} {
				Eventually(func(g Gomega) {
					m := &expv1.RedfishMaintenance{}
					g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, m)).To(Succeed())
					g.Expect(m.Status.Stage).To(Equal(expv1.StageCompleted), func() string { return name + ": " + describeMaintenance(m) })
				}, 3*time.Minute).Should(Succeed())
			}
			Eventually(func(g Gomega) {
				j := &infrav1.RedfishJob{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "setup-boot"}, j)).To(Succeed())
				g.Expect(conditions.IsTrue(j, infrav1.JobCompletedCondition)).To(BeTrue(), "%+v", j.Status)
			}).Should(Succeed())
			after := srv.Stats()
			Expect(after.SimpleUpdates-before.SimpleUpdates).To(Equal(2), "updates the BMC accepted: one per maintenance")
			Expect(after.UpdatesRefusedBusy-before.UpdatesRefusedBusy).To(BeZero(), "update requests sent while another was pushed or ran")
			Expect(after.ResetsDuringUpdate-before.ResetsDuringUpdate).To(BeZero(), "resets while an image was pushed or a task ran")
			h := &infrav1.RedfishHost{}
			Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: pushed}, h)).To(Succeed())
			Expect(h.Status.Lease).To(BeNil(), "the lease is released once both are done")
			Expect(h.Spec.RebootRequests).To(BeEmpty())

			By("a maintenance that times out while its flash runs keeps the host until the BMC shows it ended")
			before = srv.Stats()
			slow := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "bios-slow"},
				Spec: expv1.RedfishMaintenanceSpec{HostName: pushed, Reason: "firmware", Requestor: "fleet-ops", Policy: expv1.Enforced,
					Timeout: &metav1.Duration{Duration: 2 * time.Second}, Tasks: []expv1.MaintenanceTask{biosPlan(images.URL, "3.0")}}}
			Expect(env.Create(ctx, slow)).To(Succeed())
			b.firmwareMaintenance("bios-next", pushed, 0, biosPlan(images.URL, "3.1"))
			b.waitStage("bios-slow", expv1.StageFailed)
			Eventually(func(g Gomega) {
				m := &expv1.RedfishMaintenance{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "bios-next"}, m)).To(Succeed())
				g.Expect(m.Status.Stage).To(Equal(expv1.StageCompleted), describeMaintenance(m))
			}, 3*time.Minute).Should(Succeed())
			after = srv.Stats()
			Expect(after.SimpleUpdates - before.SimpleUpdates).To(BeNumerically(">=", 1))
			Expect(after.UpdatesRefusedBusy-before.UpdatesRefusedBusy).To(BeZero(), "update requests sent while the timed-out maintenance's flash ran")
			Expect(after.ResetsDuringUpdate-before.ResetsDuringUpdate).To(BeZero(), "resets while an image was pushed or a task ran")
			Expect(env.Delete(ctx, slow)).To(Succeed())
			Eventually(func(g Gomega) {
				h := &infrav1.RedfishHost{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: pushed}, h)).To(Succeed())
				g.Expect(h.Spec.RebootRequests).To(BeEmpty())
				g.Expect(h.Status.Lease).To(BeNil())
			}).Should(Succeed())

			By("a paused host: nothing reaches its BMC until the annotation goes")
			patchHost := func(name string, edit func(*infrav1.RedfishHost)) {
				Eventually(func(g Gomega) {
					h := &infrav1.RedfishHost{}
					g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: name}, h)).To(Succeed())
					base := h.DeepCopy()
					edit(h)
					g.Expect(env.Patch(ctx, h, client.MergeFrom(base))).To(Succeed())
				}).Should(Succeed())
			}
			patchHost(pushed, func(h *infrav1.RedfishHost) { h.Annotations = map[string]string{clusterv1.PausedAnnotation: ""} })
			Eventually(func(g Gomega) {
				h := &infrav1.RedfishHost{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: pushed}, h)).To(Succeed())
				g.Expect(conditions.IsTrue(h, clusterv1.PausedCondition)).To(BeTrue())
			}).Should(Succeed())
			b.firmwareMaintenance("bios-c", pushed, 0, biosPlan(images.URL, "2.2"))
			Expect(env.Create(ctx, &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "paused-boot"},
				Spec: infrav1.RedfishJobSpec{HostName: pushed, Tasks: []infrav1.JobTask{{Power: infrav1.JobPowerOn}}}})).To(Succeed())
			Eventually(func(g Gomega) {
				m := &expv1.RedfishMaintenance{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "bios-c"}, m)).To(Succeed())
				g.Expect(conditions.IsTrue(m, clusterv1.PausedCondition)).To(BeTrue(), describeMaintenance(m))
			}).Should(Succeed())
			paused := srv.Stats().Requests
			// The maintenance says it is paused; the job waits. Over 3 s (many rounds of each) the
			// BMC gets no request.
			Consistently(func(g Gomega) {
				now := srv.Stats().Requests
				for method, n := range now {
					g.Expect(n).To(Equal(paused[method]), "%s requests reached the paused host's BMC", method)
				}
			}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
			patchHost(pushed, func(h *infrav1.RedfishHost) { delete(h.Annotations, clusterv1.PausedAnnotation) })
			b.waitStage("bios-c", expv1.StageCompleted)

			By("an image-server password the BMC echoes in its task messages")
			const marker = "img-pw-" + sweepMarker
			Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "image-creds", Labels: map[string]string{maintenance.ImageCredentialsLabel: "true"}},
				StringData: map[string]string{"username": "fw-reader", "password": marker}})).To(Succeed())
			b.serverOf(pulled).Fault.EchoUpdateCredentials()
			task := biosPlan("https://images.example", "2.0")
			task.Firmware.ImageCredentialsSecretName = "image-creds"
			// Every version of the maintenance the API server stored, as a watch sees them.
			wc, err := testenv.NewWatchClient(env.Config)
			Expect(err).NotTo(HaveOccurred())
			w, err := wc.Watch(ctx, &expv1.RedfishMaintenanceList{}, client.InNamespace(b.ns))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(w.Stop)
			var mu sync.Mutex
			var versions []string
			go func() {
				for ev := range w.ResultChan() {
					if m, ok := ev.Object.(*expv1.RedfishMaintenance); ok && m.Name == "bios-creds" {
						mu.Lock()
						versions = append(versions, fmt.Sprintf("%+v", m.Status))
						mu.Unlock()
					}
				}
			}()
			b.firmwareMaintenance("bios-creds", pulled, 0, task)
			b.waitStage("bios-creds", expv1.StageCompleted)
			Expect(b.serverOf(pulled).Stats().ImageUsers).To(ContainElement("fw-reader"), "the BMC got the credentials")
			evs := &corev1.EventList{}
			Expect(env.List(ctx, evs, client.InNamespace(b.ns))).To(Succeed())
			hs := &infrav1.RedfishHostList{}
			Expect(env.List(ctx, hs, client.InNamespace(b.ns))).To(Succeed())
			mu.Lock()
			stored := append([]string{fmt.Sprintf("%+v", evs.Items), fmt.Sprintf("%+v", hs.Items)}, versions...)
			mu.Unlock()
			Expect(strings.Join(stored, "\n")).To(ContainSubstring("with password ***"), "the BMC's echo reached the status, masked")
			for _, s := range stored {
				Expect(s).NotTo(ContainSubstring(marker), "the password reached the status, a host or an event")
			}
			Expect(srv.Stats().ResetsDuringUpdate-before.ResetsDuringUpdate).To(BeZero(), "resets while an image was pushed or a task ran")

			By("a BMC-only update waits while the host runs a service image, then flashes")
			pulledSrv := b.serverOf(pulled)
			b.maintenance("diag", pulled, expv1.Enforced, expv1.MaintenanceTask{BootImage: &expv1.BootImage{URL: images.URL + "/diag.iso"}})
			Eventually(func(g Gomega) {
				h := &infrav1.RedfishHost{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: pulled}, h)).To(Succeed())
				g.Expect(h.Status.ServiceBoot).NotTo(BeNil())
			}).Should(Succeed())
			updates := pulledSrv.Stats().SimpleUpdates
			b.firmwareMaintenance("bmc-fw", pulled, 0, expv1.MaintenanceTask{Firmware: &expv1.FirmwareUpdate{Component: expv1.FirmwareBMC,
				Plan: []expv1.FirmwareVersion{{Version: "9.9", ImageURL: images.URL + "/bmc/9.9.bin"}}}})
			unsettled := func(g Gomega) {
				m := &expv1.RedfishMaintenance{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "bmc-fw"}, m)).To(Succeed())
				g.Expect(m.Status.Tasks).NotTo(BeEmpty())
				g.Expect(m.Status.Tasks[0].Message).To(ContainSubstring("settle"), describeMaintenance(m))
				g.Expect(pulledSrv.Stats().SimpleUpdates).To(Equal(updates), "a BMC update sent while the host boots an image")
			}
			Eventually(unsettled).Should(Succeed())
			Consistently(unsettled, 2*time.Second, 200*time.Millisecond).Should(Succeed())
			b.complete("diag")
			b.waitStage("diag", expv1.StageCompleted)
			b.waitStage("bmc-fw", expv1.StageCompleted)
			Expect(pulledSrv.Stats().SimpleUpdates).To(Equal(updates + 1))

			By("a deleted image maintenance: the host is handed back off and ejected, held until then")
			b.maintenance("diag-2", pulled, expv1.Enforced, expv1.MaintenanceTask{BootImage: &expv1.BootImage{URL: images.URL + "/diag2.iso"}})
			Eventually(func(g Gomega) {
				h := &infrav1.RedfishHost{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: pulled}, h)).To(Succeed())
				g.Expect(h.Status.ServiceBoot).NotTo(BeNil())
				g.Expect(h.Status.PowerState).To(Equal("On"))
			}).Should(Succeed())
			hw, err := wc.Watch(ctx, &infrav1.RedfishHostList{}, client.InNamespace(b.ns))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(hw.Stop)
			// The image runs with the power on (no hold); the deletion holds it, then lets go: the host
			// as written in each version after the hold was let go.
			var handedBack []string
			go func() {
				held := false
				for ev := range hw.ResultChan() {
					h, ok := ev.Object.(*infrav1.RedfishHost)
					if !ok || h.Name != pulled {
						continue
					}
					if slices.ContainsFunc(h.Spec.RebootRequests, func(q infrav1.RebootRequest) bool { return q.Requestor == maintenance.RequestorPrefix+"diag-2" }) {
						held = true
						continue
					}
					if held {
						mu.Lock()
						handedBack = append(handedBack, fmt.Sprintf("power %s, service boot %v", h.Status.PowerState, h.Status.ServiceBoot))
						mu.Unlock()
					}
				}
			}()
			Expect(env.Delete(ctx, b.maintenanceNamed("diag-2"))).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(apierrors.IsNotFound(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "diag-2"}, &expv1.RedfishMaintenance{}))).To(BeTrue())
				mu.Lock()
				defer mu.Unlock()
				g.Expect(handedBack).NotTo(BeEmpty())
			}).Should(Succeed())
			mu.Lock()
			Expect(handedBack[0]).To(MatchRegexp(`^power (Off|PoweringOff), service boot <nil>$`), "the first version of the host without the hold")
			mu.Unlock()
			for dev, img := range pulledSrv.Media() {
				Expect(img).To(BeEmpty(), "media left inserted in %s", dev)
			}
			Eventually(pulledSrv.PowerState).Should(Equal("Off"))

			By("a set whose firmware the BMCs reject stops at maxFailures: the hosts not started are paused and untouched")
			for _, h := range fleetHosts {
				patchHost(h, func(h *infrav1.RedfishHost) { h.Labels["set"] = "reject" })
				b.serverOf(h).Fault.FailUpdates(100)
			}
			Expect(env.Create(ctx, &expv1.RedfishMaintenanceSet{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "reject"},
				Spec: expv1.RedfishMaintenanceSetSpec{HostSelector: metav1.LabelSelector{MatchLabels: map[string]string{"set": "reject"}},
					Template: expv1.MaintenanceTemplate{Reason: "bad firmware", Requestor: "fleet-ops", Policy: expv1.Enforced,
						Tasks: []expv1.MaintenanceTask{biosPlan(images.URL, "6.6")}}}})).To(Succeed())
			Eventually(func(g Gomega) {
				set := &expv1.RedfishMaintenanceSet{}
				g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "reject"}, set)).To(Succeed())
				g.Expect(conditions.GetReason(set, infrav1.ReadyCondition)).To(Equal(maintenanceset.MaxFailuresReason), "%+v", set.Status)
				g.Expect(set.Status.Counts).To(And(HaveField("Failed", int32(1)), HaveField("Waiting", int32(2))))
			}, 3*time.Minute).Should(Succeed())
			untouched := 0
			stopped := func(g Gomega) {
				untouched = 0
				for _, h := range fleetHosts {
					m := &expv1.RedfishMaintenance{}
					g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: maintenanceset.MaintenanceName("reject", h)}, m)).To(Succeed())
					if m.Status.Stage != expv1.StageApproved && m.Status.Stage != expv1.StagePending && m.Status.Stage != expv1.StageAnnounced {
						continue
					}
					g.Expect(m.Annotations).To(HaveKey(clusterv1.PausedAnnotation))
					g.Expect(b.serverOf(h).Stats().SimpleUpdates).To(BeZero(), "host %s flashed after the set stopped", h)
					untouched++
				}
				g.Expect(untouched).To(Equal(2))
			}
			Eventually(stopped).Should(Succeed())
			Consistently(stopped, 2*time.Second, 200*time.Millisecond).Should(Succeed())
			Expect(untouched).To(Equal(2))
		})
})
