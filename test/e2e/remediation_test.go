package e2e

import (
	"maps"
	"net/http"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

var _ = Describe("Remediation", Label("remediation"), func() {
	It("power-cycles the host of an unhealthy live-ISO Machine through a MachineHealthCheck's remediation template; the host, blank after a reset from its BMC's console, boots the ISO with its seed again and the same Machine recovers", Label("live-iso-reboot"), func() {
		b := newBed("remedy", 3, nil)
		b.waitHostsAvailable(3)
		b.createCluster("remedy")
		b.controlPlane()
		b.template("workers", infrav1.RedfishMachineSpec{}) // a live-iso image
		b.machineDeployment("workers", "workers", 1)
		b.waitRunning("workers", 1)
		machine := b.machines("workers")[0]
		server := b.server(b.hostOf(machine))
		bootsBefore := server.Stats().Boots

		By("the live node's seed Secret kept once its Node joined (for its next boot), its media ejected (the seed is no longer served)")
		rm := &infrav1.RedfishMachine{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Spec.InfrastructureRef.Name}, rm)).To(Succeed())
		seedSecret := &corev1.Secret{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: seed.SecretName(rm.Name)}, seedSecret)).To(Succeed(), "the live node's seed was deleted: its next boot would come back blank")
		oldVolume := seed.CIDataURL(seedBaseURL, b.ns, rm.Name, string(seedSecret.Data[seed.KeyToken]))
		Expect(httpStatusOf(oldVolume)).To(Equal(http.StatusNotFound), "the seed is served after the join")
		Eventually(func() []string { return slices.Collect(maps.Values(server.Media())) }).Should(HaveEach(BeEmpty()))
		Expect(b.os.Booted(server.ID())).To(Equal([]string{simos.LiveOS}))
		fetched := b.os.Fetched()[server.ID()]
		Expect(fetched).To(HaveLen(1))

		By("the live node reset at the BMC's console, not by the provider, coming back blank: a live OS keeps nothing")
		resetFromOutside(server, "ForceRestart")
		Eventually(func() []string { return b.os.Booted(server.ID()) }).Should(Equal([]string{simos.LiveOS, simos.Blank}))
		Expect(b.os.Fetched()[server.ID()]).To(HaveLen(1))

		createRebootMHC(b, "workers")

		By("the Node going NotReady")
		markNodeNotReady(machine.Status.NodeRef.Name)
		node := &corev1.Node{}
		Expect(env.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, node)).To(Succeed())

		By("the host being fenced (powered off) and powered on again through Redfish")
		Eventually(func(g Gomega) {
			rr := &infrav1.RedfishRemediation{}
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Name}, rr)).To(Succeed())
			g.Expect(rr.Status.Phase).To(Equal(infrav1.RemediationCompleted), func() string { return b.dump() })
			g.Expect(rr.Status.FencedAt).NotTo(BeNil())
			g.Expect(rr.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.PausedCondition), HaveField("Status", metav1.ConditionFalse))))
		}).Should(Succeed())
		Expect(server.Stats().Resets["ForceOff"]).To(BeNumerically(">=", 1))
		Expect(server.Stats().Boots).To(BeNumerically(">", bootsBefore))

		By("the same Machine recovering and the MachineHealthCheck cleaning up")
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKey{Name: node.Name}, node)).To(Succeed())
			g.Expect(node.Status.Conditions).To(ContainElement(And(
				HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
			ms := b.machines("workers")
			g.Expect(ms).To(HaveLen(1))
			g.Expect(ms[0].Name).To(Equal(machine.Name), "the Machine was replaced instead of remediated")
			err := env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Name}, &infrav1.RedfishRemediation{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "remediation request still present: %v", err)
		}, 2*time.Minute).Should(Succeed())
		h := &infrav1.RedfishHost{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: server.ID()}, h)).To(Succeed())
		Expect(h.Spec.RebootRequests).To(BeEmpty())
		Expect(h.Status.LiveBootIssuedAt).NotTo(BeNil())

		By("the remediation's power-on having attached the ISO and its seed again and booted them: cloud-init ran the same bootstrap data again")
		Expect(b.os.Booted(server.ID())).To(Equal([]string{simos.LiveOS, simos.Blank, simos.LiveOS}), "the remediation's power-on did not boot the live image")
		Expect(b.os.Fetched()[server.ID()]).To(Equal([]string{fetched[0], fetched[0]}))
		Expect(slices.Collect(maps.Values(server.Media()))).To(ContainElements(HaveSuffix("/image"), HaveSuffix("/cidata.iso")))

		By("the live boot having renewed the seed's token: the old one fetches nothing, the new one is served during the boot's window")
		Expect(env.Get(ctx, client.ObjectKeyFromObject(seedSecret), seedSecret)).To(Succeed())
		newVolume := seed.CIDataURL(seedBaseURL, b.ns, rm.Name, string(seedSecret.Data[seed.KeyToken]))
		Expect(newVolume).NotTo(Equal(oldVolume))
		Expect(slices.Collect(maps.Values(server.Media()))).To(ContainElement(newVolume))
		Expect(httpStatusOf(oldVolume)).To(Equal(http.StatusNotFound))
		Expect(httpStatusOf(newVolume)).To(Equal(http.StatusOK))
	})
})
