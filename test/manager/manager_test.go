// Package manager runs the real manager binary the way the release deploys it: the Deployment's
// arguments from the rendered infrastructure-components.yaml, and the release's RBAC applied to a
// real API server, the manager acting as its ServiceAccount. If the RBAC misses a permission, a
// flag is wrong, or the probes, metrics or seed server do not come up, a Machine does not run here.
package manager

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/release"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
	"github.com/caprf/cluster-api-provider-redfish/internal/webhooks"
	"github.com/caprf/cluster-api-provider-redfish/simulator"

	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
)

const (
	ns          = "caprf-system"
	sa          = "system:serviceaccount:caprf-system:caprf-manager"
	bmcPassword = "Rack-Secret-7f3a9c" // must never reach the manager's log
)

func TestReleasedManagerRunsAMachineWithTheReleasedRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	g := NewWithT(t)
	ctx := t.Context()

	rel := startRelease(t, ctx, map[string]string{"CAPRF_SEED_HOSTNAME": "seed.rack.example", "CAPRF_LOGLEVEL": "10"}) // lowered to provider.MaxLogVerbosity: the log is searched for secrets below
	env, bin, args, kubeconfig, grace := rel.env, rel.bin, rel.args, rel.kubeconfig, rel.grace
	seedAddr, metricsAddr, probeAddr, profilerAddr, seedCAs, seedClient := rel.seedAddr, rel.metricsAddr, rel.probeAddr, rel.profilerAddr, rel.seedCAs, rel.seedClient
	logs, stopLeader := startManager(t, bin, args, kubeconfig)

	t.Log("the manager becomes ready (webhook server up) and healthy")
	for _, path := range []string{"/healthz", "/readyz"} {
		g.Eventually(func() (int, error) { return httpStatus("http://" + probeAddr + path) }, time.Minute, 200*time.Millisecond).
			Should(Equal(http.StatusOK), "%s\n%s", path, logs)
	}

	t.Log("--profiler-address serves Go's pprof profiles")
	g.Expect(httpStatus("http://" + profilerAddr + "/debug/pprof/")).To(Equal(http.StatusOK))

	t.Log("a control-plane Machine runs on a simulated server, reconciled by the binary as its ServiceAccount")
	fleet, err := simulator.StartFleet(simulator.FleetOptions{Servers: 1, NamePrefix: "mgr", Password: bmcPassword, PowerLatency: 50 * time.Millisecond,
		IPXEChainURL: "https://" + seedAddr + "/v1/ipxe", FirmwareRootCAs: seedCAs})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(fleet.Close)
	kubelet, err := testenv.NewWatchClient(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	simOS := simos.New(kubelet)
	simOS.RootCAs = seedCAs
	simOS.Attach(fleet)

	g.Expect(env.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rack"}})).To(Succeed())
	creds, host := sample.Host("rack", fleet.Servers[0])
	rc, cluster := sample.Cluster("rack", "rack", "10.0.0.10")
	data, rm, machine := sample.ControlPlane("rack", "rack", "rack-cp")
	for _, o := range []client.Object{creds, host, rc, cluster} {
		g.Expect(env.Create(ctx, o)).To(Succeed())
	}
	g.Expect(env.CreateKubeconfigSecret(ctx, cluster)).To(Succeed())
	for _, o := range []client.Object{data, rm, machine} {
		g.Expect(env.Create(ctx, o)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		if line := forbidden(logs.String()); line != "" {
			StopTrying("the release's RBAC refused the manager: " + line).Now()
		}
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
		g.Expect(machine.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)))
		g.Expect(machine.Status.NodeRef.IsDefined()).To(BeTrue())
	}, 3*time.Minute, 500*time.Millisecond).Should(Succeed(), func() string { return "manager log:\n" + logs.String() })
	g.Expect(simOS.Errors()).To(BeEmpty())

	t.Log("Prometheus, bound to caprf-metrics-reader, scrapes the metrics endpoint; the manager checks its token")
	token := metricsReaderToken(t, env)
	g.Eventually(func(g Gomega) {
		body, code, err := scrape("https://"+metricsAddr+"/metrics", token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring(`caprf_host_state{host="mgr-0",namespace="rack",state="Provisioned"} 1`))
	}, time.Minute, 500*time.Millisecond).Should(Succeed())
	_, code, err := scrape("https://"+metricsAddr+"/metrics", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusUnauthorized), "metrics must not be served without a token")

	t.Log("a second replica, not the leader, serves the seed too: the seed Service may route a booting host to it")
	args2, seed2, standbyWebhookPort := replicaArgs(t, args)
	logs2, _ := startManager(t, bin, args2, kubeconfig)
	g.Eventually(func() (int, error) {
		return httpStatusWith(seedClient, "https://"+seed2+"/v1/rack/rack-cp/not-a-token/meta-data")
	}, time.Minute, 200*time.Millisecond).
		Should(Equal(http.StatusNotFound), "the standby replica does not serve the seed\n%s", logs2)

	t.Log("the standby serves a live claim's seed: a second control-plane Machine on a server whose OS never boots keeps its seed")
	fleet2, err := simulator.StartFleet(simulator.FleetOptions{Servers: 1, NamePrefix: "mgr-noos", Fleet: 2, Password: bmcPassword, PowerLatency: 50 * time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(fleet2.Close)
	creds2, host2 := sample.Host("rack", fleet2.Servers[0])
	data2, rm2, machine2 := sample.ControlPlane("rack", "rack", "rack-cp2")
	for _, o := range []client.Object{creds2, host2, data2, rm2, machine2} {
		g.Expect(env.Create(ctx, o)).To(Succeed())
	}
	seedSecret := &corev1.Secret{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: "rack", Name: seed.SecretName("rack-cp2")}, seedSecret)).To(Succeed())
		g.Expect(fleet2.Servers[0].Stats().Boots).To(BeNumerically(">=", 1))
	}, 2*time.Minute, 500*time.Millisecond).Should(Succeed(), func() string { return "manager log:\n" + logs.String() })
	metaData := seed.Dir("https://"+seed2, "rack", "rack-cp2", string(seedSecret.Data[seed.KeyToken])) + "meta-data"
	resp, err := seedClient.Get(metaData) //nolint:noctx // test
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "the standby's seed server: %s\n%s", raw, logs2)
	g.Expect(string(raw)).To(ContainSubstring("provider-id: redfish://rack/mgr-noos-0/rack-cp2"))

	t.Log("the standby answers admission requests: the Service routes to every replica")
	bad := host2.DeepCopy()
	bad.ObjectMeta = metav1.ObjectMeta{Namespace: "rack", Name: "bad"}
	bad.Spec.BMC.Address = "ftp://10.0.0.9"
	review := admissionReview(t, standbyWebhookPort, bad)
	g.Expect(review.Allowed).To(BeFalse(), "the standby's webhook allowed a RedfishHost with an ftp:// BMC address")
	g.Expect(review.Result.Message).To(ContainSubstring("spec.bmc.address"))
	g.Expect(logs.String()).To(ContainSubstring("Successfully acquired lease"))
	g.Expect(logs2.String()).NotTo(ContainSubstring("Successfully acquired lease"), "the standby took the lease")

	t.Log("deleting the Machine releases and cleans the host")
	g.Expect(env.Delete(ctx, machine)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(host), host)).To(Succeed())
		g.Expect(string(host.Status.State)).To(Equal("Available"))
		g.Expect(host.Status.Claim).To(BeNil())
	}, 3*time.Minute, 500*time.Millisecond).Should(Succeed(), func() string { return "manager log:\n" + logs.String() })

	out := logs.String()
	g.Expect(forbidden(out)).To(BeEmpty(), "the release's RBAC refused the manager something")
	g.Expect(out).NotTo(ContainSubstring(bmcPassword), "a BMC password reached the log")
	g.Expect(out).NotTo(ContainSubstring("#cloud-config for"), "bootstrap data reached the log")
	g.Expect(out).To(ContainSubstring("--v=10 lowered to 7"), "the manager ran at --v=10 without saying it lowered it")
	// From --v=8 on client-go logs API answers' bodies, Secrets included (hex-dumped: a password
	// may straddle two lines of the dump, so look for the bodies themselves).
	g.Expect(out).NotTo(ContainSubstring("Response Body"), "API answers' bodies reached the log")

	lease := &coordinationv1.Lease{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "controller-leader-election-caprf"}, lease)).To(Succeed())
	g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil(), "the manager ran without holding its leader election lease")

	t.Log("a host's BMC stops answering while the leader reads it")
	fleet3, err := simulator.StartFleet(simulator.FleetOptions{Servers: 1, NamePrefix: "mgr-slow", Fleet: 3, Password: bmcPassword, PowerLatency: 50 * time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(fleet3.Close)
	slow := fleet3.Servers[0]
	creds3, host3 := sample.Host("rack", slow)
	for _, o := range []client.Object{creds3, host3} {
		g.Expect(env.Create(ctx, o)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(host3), host3)).To(Succeed())
		g.Expect(string(host3.Status.State)).To(Equal("Available"))
	}, time.Minute, 200*time.Millisecond).Should(Succeed(), func() string { return "manager log:\n" + logs.String() })
	slow.Fault.Hang()
	gets := slow.Stats().Requests[http.MethodGet]
	// Any change wakes the host: its round reads the BMC's power state, and that request hangs.
	g.Expect(env.Get(ctx, client.ObjectKeyFromObject(host3), host3)).To(Succeed())
	host3.Annotations = map[string]string{"example.com/touched": "1"}
	g.Expect(env.Update(ctx, host3)).To(Succeed())
	g.Eventually(func() int { return slow.Stats().Requests[http.MethodGet] }, time.Minute, 50*time.Millisecond).
		Should(BeNumerically(">", gets), "the leader did not read the host's BMC again")

	t.Log("the leader stopped as the kubelet stops its pod: it exits within the pod's grace period, logging its BMC sessions out and logging no error for the reconcile it interrupted; the standby takes over with one session per BMC")
	before := len(logs.String())
	stopped := time.Now()
	g.Expect(stopLeader()).To(Succeed(), "the leader did not shut down cleanly on SIGTERM")
	took := time.Since(stopped)
	t.Logf("the leader stopped %.1fs after SIGTERM (a BMC that does not answer its logout is given up after 5s)", took.Seconds())
	g.Expect(took).To(BeNumerically("<", grace), "the leader outlived its pod's terminationGracePeriodSeconds")
	atStop := logs.String()[before:]
	g.Expect(atStop).To(ContainSubstring("Reconcile interrupted: the manager is stopping"), "no reconcile was in flight at the stop: the step proves nothing")
	for line := range strings.Lines(atStop) {
		if strings.Contains(line, "Reconciler error") {
			t.Errorf("the leader logged an error for the reconcile its stop interrupted: %s", line)
		}
	}
	g.Expect(atStop).NotTo(ContainSubstring(bmcPassword), "a BMC password reached the log")
	slow.Fault.Unhang()
	servers := append(slices.Clone(fleet.Servers), fleet2.Servers...)
	g.Eventually(func(g Gomega) {
		g.Expect(logs2.String()).To(ContainSubstring("Successfully acquired lease"), "the standby did not take over")
		for _, s := range servers {
			g.Expect(s.Stats().SessionsCreated).To(BeNumerically(">=", 2), "%s: the standby has not logged in yet", s.ID())
		}
	}, time.Minute, 200*time.Millisecond).Should(Succeed(), func() string { return "standby log:\n" + logs2.String() })
	for _, s := range servers {
		g.Expect(s.ActiveSessions()).To(Equal(1), "%s: sessions open after the leader stopped and the standby logged in", s.ID())
	}
}

// world is the released manager's world: a real API server with CAPI's controllers and our
// webhooks, the release's RBAC applied, the manager binary and the Deployment's arguments (with
// this machine's free ports), and a kubeconfig that acts as the manager's ServiceAccount.
type world struct {
	env                                            *testenv.Environment
	bin, kubeconfig                                string
	args                                           []string
	grace                                          time.Duration // the pod's terminationGracePeriodSeconds
	seedAddr, metricsAddr, probeAddr, profilerAddr string
	seedCAs                                        *x509.CertPool
	seedClient                                     *http.Client
}

// startRelease builds the binary and starts its world; vars are clusterctl's variables
// (CAPRF_SEED_URL defaults to the seed server's own address).
func startRelease(t *testing.T, ctx context.Context, vars map[string]string) *world {
	t.Helper()
	g := NewWithT(t)
	dir := t.TempDir()
	r := &world{}

	// The binary, built as the image builds it.
	r.bin = filepath.Join(dir, "manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", r.bin, "../..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// CAPI's controllers and webhooks, and our webhooks (their configuration points at the test
	// process); the provider's controllers run only in the binary.
	env, err := testenv.Start(ctx, testenv.Options{
		SetupProvider: func(ctx context.Context, mgr ctrl.Manager, _ clustercache.ClusterCache) error {
			return webhooks.Setup(ctx, mgr, mgr.GetAPIReader(), "")
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	r.env = env

	var webhookPort int
	r.seedAddr, r.metricsAddr, r.probeAddr, webhookPort = freeAddr(t), freeAddr(t), freeAddr(t), freePort(t)
	vars = maps.Clone(vars)
	if vars["CAPRF_SEED_URL"] == "" {
		vars["CAPRF_SEED_URL"] = "https://" + r.seedAddr
	}
	objs := renderComponents(t, vars)

	// The release's RBAC, applied for real.
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			g.Expect(env.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("release"), client.ForceOwnership)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
		case "Deployment":
			d := &appsv1.Deployment{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d)).To(Succeed())
			r.args = d.Spec.Template.Spec.Containers[0].Args
			r.grace = time.Duration(ptr.Deref(d.Spec.Template.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
		}
	}
	g.Expect(r.args).NotTo(BeEmpty())

	// The Deployment's arguments; only addresses a pod would own are moved to free loopback ports.
	certDir := webhookCert(t, dir)
	// The seed server's certificate where cert-manager would mount it, and the CA that the
	// servers' firmware and image trust.
	seedCertDir, err := testenv.WriteServingCert(filepath.Join(dir, "seed-certs"), "seed.rack.example")
	g.Expect(err).NotTo(HaveOccurred())
	seedCA, err := os.ReadFile(filepath.Join(seedCertDir, "tls.crt"))
	g.Expect(err).NotTo(HaveOccurred())
	r.seedCAs = x509.NewCertPool()
	g.Expect(r.seedCAs.AppendCertsFromPEM(seedCA)).To(BeTrue())
	r.seedClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.seedCAs, MinVersion: tls.VersionTLS12}}}
	for i, a := range r.args {
		switch {
		case strings.HasPrefix(a, "--seed-bind-address="):
			r.args[i] = "--seed-bind-address=" + r.seedAddr
		case strings.HasPrefix(a, "--seed-cert-dir="):
			r.args[i] = "--seed-cert-dir=" + seedCertDir
		case strings.HasPrefix(a, "--metrics-bind-address="):
			r.args[i] = "--metrics-bind-address=" + r.metricsAddr
		}
	}
	r.profilerAddr = freeAddr(t)
	r.args = append(r.args, "--health-probe-bind-address="+r.probeAddr, fmt.Sprintf("--webhook-port=%d", webhookPort),
		"--webhook-cert-dir="+certDir, "--leader-election-namespace="+ns, "--profiler-address="+r.profilerAddr)

	r.kubeconfig = filepath.Join(dir, "kubeconfig")
	g.Expect(env.WriteKubeconfig(r.kubeconfig, testenv.KubeconfigOptions{Impersonate: sa})).To(Succeed())
	return r
}

// replicaArgs returns args with every address a pod owns moved to a free port, for a second
// replica on this machine, with its seed server's address and its webhook port.
func replicaArgs(t *testing.T, args []string) (out []string, seedAddr, webhookPort string) {
	t.Helper()
	out = slices.Clone(args)
	seedAddr = freeAddr(t)
	for i, a := range out {
		switch {
		case strings.HasPrefix(a, "--seed-bind-address="):
			out[i] = "--seed-bind-address=" + seedAddr
		case strings.HasPrefix(a, "--metrics-bind-address="):
			out[i] = "--metrics-bind-address=" + freeAddr(t)
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			out[i] = "--health-probe-bind-address=" + freeAddr(t)
		case strings.HasPrefix(a, "--webhook-port="):
			webhookPort = strconv.Itoa(freePort(t))
			out[i] = "--webhook-port=" + webhookPort
		case strings.HasPrefix(a, "--profiler-address="):
			out[i] = "--profiler-address=" + freeAddr(t)
		}
	}
	return out, seedAddr, webhookPort
}

// startManager runs the manager binary with args as the manager's ServiceAccount and stops it with
// SIGTERM when the test ends (or when stop is called), as the kubelet stops a pod; it must exit
// cleanly.
func startManager(t *testing.T, bin string, args []string, kubeconfig string) (*testenv.Output, func() error) {
	t.Helper()
	logs := &testenv.Output{}
	cmd := exec.Command(bin, args...) //nolint:gosec,noctx // stopped with SIGTERM below.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case result = <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				result = errors.New("the manager did not stop within 30s of SIGTERM")
			}
		})
		return result
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("the manager did not shut down cleanly on SIGTERM: %v", err)
		}
		if t.Failed() {
			t.Logf("manager log:\n%s", logs)
		}
	})
	return logs, stop
}

// forbidden returns the first log line in which the API server refused the manager, or "".
func forbidden(log string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, "is forbidden") {
			return line
		}
	}
	return ""
}

// renderComponents substitutes variables into infrastructure-components.yaml the way clusterctl
// does and returns its objects.
func renderComponents(t *testing.T, vars map[string]string) []unstructured.Unstructured {
	t.Helper()
	raw, err := release.Components("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := yamlprocessor.NewSimpleProcessor().Process(raw, func(name string) (string, error) {
		if v, ok := vars[name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("variable %s not set", name)
	})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := utilyaml.ToUnstructured(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// metricsReaderToken returns a token of a ServiceAccount bound to the release's metrics reader role.
func metricsReaderToken(t *testing.T, env *testenv.Environment) string {
	t.Helper()
	ctx := t.Context()
	g := NewWithT(t)
	g.Expect(env.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prometheus"}})).To(Succeed())
	g.Expect(env.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-caprf-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "caprf-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "prometheus"}},
	})).To(Succeed())
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "prometheus", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

func scrape(url, token string) (string, int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the manager's self-signed metrics certificate.
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return string(body), resp.StatusCode, err
}

// admissionReview sends the creation of h to the RedfishHost validating webhook on port, as the
// API server does, and returns the answer.
func admissionReview(t *testing.T, port string, h *infrav1.RedfishHost) *admissionv1.AdmissionResponse {
	t.Helper()
	h.TypeMeta = metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: "RedfishHost"}
	raw, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "review-1",
			Kind:      metav1.GroupVersionKind{Group: infrav1.GroupVersion.Group, Version: infrav1.GroupVersion.Version, Kind: "RedfishHost"},
			Resource:  metav1.GroupVersionResource{Group: infrav1.GroupVersion.Group, Version: infrav1.GroupVersion.Version, Resource: "redfishhosts"},
			Operation: admissionv1.Create, Namespace: h.Namespace, Name: h.Name,
			Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}                         //nolint:gosec // the test's self-signed webhook certificate.
	resp, err := c.Post("https://127.0.0.1:"+port+"/validate-infrastructure-cluster-x-k8s-io-v1alpha1-redfishhost", "application/json", bytes.NewReader(in)) //nolint:noctx // test
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out := admissionv1.AdmissionReview{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
		t.Fatalf("webhook answer %d: %v", resp.StatusCode, err)
	}
	if out.Response.Result == nil {
		out.Response.Result = &metav1.Status{}
	}
	return out.Response
}

func httpStatus(url string) (int, error) {
	return httpStatusWith(&http.Client{Timeout: 2 * time.Second}, url)
}

func httpStatusWith(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url) //nolint:noctx // a probe
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// webhookCert writes a self-signed serving certificate where cert-manager would mount one.
func webhookCert(t *testing.T, dir string) string {
	t.Helper()
	certDir, err := testenv.WriteServingCert(filepath.Join(dir, "certs"), "caprf-webhook-service.caprf-system.svc")
	if err != nil {
		t.Fatal(err)
	}
	return certDir
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", freePort(t))
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
