package e2e

import (
	"math/rand/v2"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

var _ = Describe("A BIOS update through manager restarts", func() {
	It("flashes each version once when the manager is restarted right after each update request and at random points in between", Label("flash-once-restart"), func() {
		b := profileBed("flashrestart", 1, []string{"dmtf"}, false)
		b.waitHostsAvailable(1)
		host := b.hosts()[0].Name
		srv := b.serverOf(host)
		images := imageServer()
		versions := []string{"5.1", "5.2", "5.3", "5.4", "5.5"}
		before := srv.Stats()

		restarts := 0
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			seen := before.SimpleUpdates
			next := time.Now().Add(time.Duration(300+rand.IntN(900)) * time.Millisecond) //nolint:gosec // test timing
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				n := srv.Stats().SimpleUpdates
				if n == seen && time.Now().Before(next) {
					continue
				}
				// Right after an update request the BMC accepted (its answer, and the round's
				// status write, most likely lost), or at a random point.
				seen = n
				Expect(env.RestartManager()).To(Succeed())
				restarts++
				next = time.Now().Add(time.Duration(300+rand.IntN(900)) * time.Millisecond) //nolint:gosec // test timing
			}
		}()
		b.firmwareMaintenance("bios-restarts", host, 0, biosPlan(images.URL, versions...))
		Eventually(func(g Gomega) {
			m := &expv1.RedfishMaintenance{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: "bios-restarts"}, m)).To(Succeed())
			g.Expect(m.Status.Stage).To(Equal(expv1.StageCompleted), describeMaintenance(m))
		}, 5*time.Minute).Should(Succeed())
		close(stop)
		<-done
		after := srv.Stats()
		GinkgoWriter.Printf("restarts: %d; updates accepted: %d; refused busy: %d\n", restarts, after.SimpleUpdates-before.SimpleUpdates, after.UpdatesRefusedBusy-before.UpdatesRefusedBusy)
		Expect(restarts).To(BeNumerically(">=", 10))
		Expect(after.SimpleUpdates-before.SimpleUpdates).To(Equal(len(versions)), "each version flashed once")
		Expect(after.UpdatesRefusedBusy - before.UpdatesRefusedBusy).To(BeZero())
		Expect(after.ResetsDuringUpdate - before.ResetsDuringUpdate).To(BeZero())
		bios, _ := srv.FirmwareVersions()
		Expect(bios).To(Equal(versions[len(versions)-1]))
	})
})
