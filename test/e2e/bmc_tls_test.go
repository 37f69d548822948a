package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// BMCs serving HTTPS with a certificate of their own CA: a host whose CA bundle Secret holds that
// CA is used; one without a bundle (and without insecureSkipVerify), or with another CA's, says
// CertificateUntrusted and sends nothing; and the right CA put into the bundle Secret is used at
// the host's next try, without a restart and never behind an open breaker (the untrusted tries
// do not count as the BMC failing).
var _ = Describe("BMC TLS", func() {
	It("uses a BMC whose CA is in the host's bundle, says CertificateUntrusted otherwise, and takes a rotated bundle at the next try", Label("tls"), func() {
		b := startBed("bmctls", 2, bedOptions{fleet: simulator.FleetOptions{TLS: true}, mutate: func(i int, h *infrav1.RedfishHost) {
			if i == 0 {
				h.Spec.BMC.CABundleName = "bmc-ca"
			}
		}})
		ca := b.fleet.Servers[0].CACertPEM()
		Expect(ca).NotTo(BeEmpty())
		Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "bmc-ca"}, Data: map[string][]byte{"ca.crt": ca}})).To(Succeed())
		trusted, untrusted := b.hosts()[0], b.hosts()[1]
		if trusted.Spec.BMC.CABundleName == "" {
			trusted, untrusted = untrusted, trusted
		}

		By("the host with the BMC's CA in its bundle: inspected and Available")
		waitHostState(&trusted, infrav1.HostStateAvailable)

		server := b.server(untrusted.Name)
		untrustedSays := func(what string) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				// Its BMC refused a handshake: the host tried, and did not trust the certificate.
				g.Expect(server.Stats().TLSHandshakeFailures).To(BeNumerically(">", 0))
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&untrusted), &untrusted)).To(Succeed())
				c := conditions.Get(&untrusted, infrav1.BMCReachableCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse), "%s: %+v; the BMC refused %d handshakes; state %s", what, *c, server.Stats().TLSHandshakeFailures, untrusted.Status.State)
				g.Expect(c.Reason).To(Equal(infrav1.BMCCertificateUntrustedReason), what+": "+c.Message)
				g.Expect(c.Message).To(ContainSubstring("spec.bmc.caBundleName"))
			}, time.Minute, 200*time.Millisecond).Should(Succeed())
			Expect(untrusted.Status.State).NotTo(Equal(infrav1.HostStateAvailable))
		}
		By("the host without a bundle: CertificateUntrusted, naming caBundleName")
		untrustedSays("without a CA bundle")

		By("a bundle with another CA: still CertificateUntrusted, after a new try with it")
		bundle := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "rotating-ca"}, Data: map[string][]byte{"ca.crt": otherCA()}}
		Expect(env.Create(ctx, bundle)).To(Succeed())
		before := untrusted.DeepCopy()
		untrusted.Spec.BMC.CABundleName = bundle.Name
		failed := server.Stats().TLSHandshakeFailures
		Expect(env.Patch(ctx, &untrusted, client.MergeFrom(before))).To(Succeed())
		// The BMC refused another handshake: the host tried with the other CA's bundle.
		Eventually(func() int { return server.Stats().TLSHandshakeFailures }, time.Minute, 100*time.Millisecond).Should(BeNumerically(">", failed))
		untrustedSays("with another CA's bundle")

		By("the right CA put into the bundle Secret: used at the next try")
		bundle.Data = map[string][]byte{"ca.crt": ca}
		Expect(env.Update(ctx, bundle)).To(Succeed())
		rotated := time.Now()
		// The host's retry interval (2s in this suite), and no breaker cooldown to wait out.
		const nextTry = 2 * time.Second
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(&untrusted), &untrusted)).To(Succeed())
			g.Expect(conditions.IsTrue(&untrusted, infrav1.BMCReachableCondition)).To(BeTrue(), func() string { return fmt.Sprint(conditions.Get(&untrusted, infrav1.BMCReachableCondition)) })
		}, nextTry+5*time.Second, 100*time.Millisecond).Should(Succeed())
		AddReportEntry("tls", fmt.Sprintf("BMC reachable %v after its CA was put into the bundle Secret (retry interval %v)", time.Since(rotated).Round(10*time.Millisecond), nextTry))
		waitHostState(&untrusted, infrav1.HostStateAvailable)
	})
})

// waitHostState waits until h reaches state.
func waitHostState(h *infrav1.RedfishHost, state infrav1.HostState) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
		g.Expect(h.Status.State).To(Equal(state), func() string { return fmt.Sprint(h.Status.Conditions) })
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
}

// otherCA is the PEM certificate of a CA that signed none of the fleet's BMCs.
func otherCA() []byte {
	GinkgoHelper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	Expect(err).NotTo(HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
