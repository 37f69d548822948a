package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
)

// slowImageServer serves firmware images after a delay: a multipart push through the provider
// takes that long, while the BMC lists no task yet.
func slowImageServer(delay time.Duration) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("firmware", 1024)))
	}))
	DeferCleanup(srv.Close)
	return srv
}

var _ = Describe("One flash at a time per host", func() {
	It("lets two maintenances and a RedfishJob racing for one host flash it once each, one after the other, with no boot while an image is pushed or applied; a paused host's BMC gets nothing; an image-server password a BMC echoes appears nowhere", Label("flash-exclusive", "host-paused-maintenance", "image-credentials-masked"), func() {
		// supermicro-x13 takes images only pushed (multipart): the push runs for seconds before
		// the BMC lists a task. dmtf pulls them (SimpleUpdate) with the image server's credentials.
		b := profileBed("flashlease", 2, []string{"supermicro-x13", "dmtf"}, false)
		b.waitHostsAvailable(2)
		hostOf := map[string]string{}
		for _, h := range b.hosts() {
			hostOf[h.Labels[profileLabel]] = h.Name
		}
		pushed, pulled := hostOf["supermicro-x13"], hostOf["dmtf"]
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
		const marker = "img-pw-marker-5c1e"
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
	})
})
