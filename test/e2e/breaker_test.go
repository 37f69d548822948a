package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// A BMC that stopped answering opens its circuit breaker; when an administrator rotates its
// password meanwhile (the BMC ends every session) and the operator updates the credentials
// Secret, the BMC is used again as soon as it answers: within one breaker cooldown and one
// retry interval, never left behind an open breaker.
var _ = Describe("Circuit breaker", func() {
	It("uses a BMC that recovers after its credentials were rotated again within one backoff", Label("breaker-recovers"), func() {
		b := newBedWithoutOS("breaker", 1)
		b.waitHostsAvailable(1)
		server := b.fleet.Servers[0]
		h := b.hosts()[0]

		By("the BMC failing every request: the breaker opens")
		server.Fault.ErrorBurst(1<<30, 503)
		// A settled host reads its BMC every bmcCheckInterval; a new Secret version makes it look now.
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&h), &h)).To(Succeed())
			c := conditions.Get(&h, infrav1.BMCReachableCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("circuit breaker"))
		}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())

		By("rotating the BMC's password and the credentials Secret while the breaker is open")
		const rotated = "rotated-" + sweepMarker
		server.SetPassword(rotated)
		user, _ := server.Credentials()
		creds := &corev1.Secret{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: h.Spec.BMC.CredentialsName}, creds)).To(Succeed())
		creds.Data = map[string][]byte{"username": []byte(user), "password": []byte(rotated)}
		Expect(env.Update(ctx, creds)).To(Succeed())

		By("the BMC answering again")
		server.Fault.ErrorBurst(0, 0)
		recovered := time.Now()
		// One backoff: the breaker's cooldown (5s in this suite) and the host's retry interval (2s).
		const oneBackoff = 5*time.Second + 2*time.Second
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&h), &h)).To(Succeed())
			g.Expect(conditions.IsTrue(&h, infrav1.BMCReachableCondition)).To(BeTrue(), func() string { return fmt.Sprint(conditions.Get(&h, infrav1.BMCReachableCondition)) })
		}, oneBackoff+5*time.Second, 100*time.Millisecond).Should(Succeed())
		took := time.Since(recovered)
		AddReportEntry("breaker-recovers", fmt.Sprintf("BMC reachable again %v after it answered (one backoff: %v)", took.Round(10*time.Millisecond), oneBackoff))
		Expect(h.Status.State).To(Equal(infrav1.HostStateAvailable))
	})
})
