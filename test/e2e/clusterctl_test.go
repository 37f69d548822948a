package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctl "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/release"
)

// What a user of the release must or may set; a change here is a change to the README's tables.
var (
	componentVariables = []string{
		"CAPRF_SEED_URL", "CAPRF_SEED_HOSTNAME", "CAPRF_SEED_INSECURE_HTTP", "CAPRF_SEED_SERVICE_TYPE", "CAPRF_SEED_NODE_PORT",
		"CAPRF_CONCURRENCY", "CAPRF_KUBE_API_QPS",
		"CAPRF_KUBE_API_BURST", "CAPRF_LOGLEVEL",
	}
	templateVariables = []string{
		"CLUSTER_NAME", "KUBERNETES_VERSION", "CONTROL_PLANE_MACHINE_COUNT", "WORKER_MACHINE_COUNT",
		"CONTROL_PLANE_ENDPOINT_HOST", "CONTROL_PLANE_ENDPOINT_PORT", "POD_CIDR", "SERVICE_CIDR",
		"IMAGE_URL", "IMAGE_FORMAT", "AUTOMATED_CLEANING_MODE",
	}
)

var _ = Describe("clusterctl release", Label("clusterctl"), func() {
	It("installs components labelled for clusterctl with their variables, and renders every flavor into objects the API server admits", func() {
		repo := GinkgoT().TempDir()
		componentsPath, err := release.WriteRepository("../..", repo, "v0.1.0")
		Expect(err).NotTo(HaveOccurred())

		By("labelling every object of the kustomize build for clusterctl, and the CRDs with the CAPI contract")
		raw, err := os.ReadFile(componentsPath)
		Expect(err).NotTo(HaveOccurred())
		built, err := utilyaml.ToUnstructured(raw)
		Expect(err).NotTo(HaveOccurred())
		crds := 0
		for _, o := range built {
			Expect(o.GetLabels()).To(HaveKeyWithValue(clusterv1.ProviderNameLabel, "infrastructure-redfish"), "%s %s", o.GetKind(), o.GetName())
			if o.GetKind() == "CustomResourceDefinition" {
				crds++
				Expect(o.GetLabels()).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1alpha1"), o.GetName())
			}
			switch o.GetName() {
			case "redfishhosts.infrastructure.cluster.x-k8s.io":
				Expect(o.GetLabels()).To(HaveKey(clusterctlv1.ClusterctlMoveHierarchyLabel), "hosts must move with clusterctl move")
			case "redfishremediationtemplates.infrastructure.cluster.x-k8s.io":
				// Referenced by MachineHealthChecks but owned by nothing.
				Expect(o.GetLabels()).To(HaveKey(clusterctlv1.ClusterctlMoveLabel), "remediation templates must move with clusterctl move")
			}
		}
		Expect(crds).To(Equal(11))

		config := filepath.Join(repo, "clusterctl.yaml")
		Expect(os.WriteFile(config, []byte(`providers:
- name: redfish
  type: InfrastructureProvider
  url: file://`+componentsPath+`
CAPRF_SEED_URL: https://seed.rack.example:30082
CAPRF_SEED_HOSTNAME: seed.rack.example
CONTROL_PLANE_ENDPOINT_HOST: 10.0.0.100
IMAGE_URL: https://images.example/k8s-v1.36.3
IMAGE_CHECKSUM: 0f343b0931126a20f133d67c2b018a3b0f343b0931126a20f133d67c2b018a3b
`), 0o600)).To(Succeed())
		c, err := clusterctl.New(ctx, config)
		Expect(err).NotTo(HaveOccurred())

		By("reading the components the way `clusterctl init --infrastructure redfish` does")
		comps, err := c.GetProviderComponents(ctx, "redfish:v0.1.0", clusterctlv1.InfrastructureProviderType, clusterctl.ComponentsOptions{TargetNamespace: "caprf-system"})
		Expect(err).NotTo(HaveOccurred())
		Expect(comps.Variables()).To(ConsistOf(componentVariables))
		deployment := &appsv1.Deployment{}
		for _, o := range comps.Objs() {
			if o.GetKind() == "Deployment" {
				Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, deployment)).To(Succeed())
			}
		}
		Expect(deployment.Spec.Template.Spec.Containers).To(HaveLen(1))
		Expect(deployment.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--leader-elect", "--seed-url=https://seed.rack.example:30082", "--seed-cert-dir=/tmp/seed-serving-certs", "--seed-insecure-http=false"))

		By("describing the provider the way `clusterctl generate provider --describe` and `--raw` do (no variable processing)")
		described, err := c.GetProviderComponents(ctx, "redfish:v0.1.0", clusterctlv1.InfrastructureProviderType, clusterctl.ComponentsOptions{SkipTemplateProcess: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(described.Images()).To(ConsistOf("ghcr.io/caprf/cluster-api-provider-redfish:v0.1.0"))
		Expect(described.Variables()).To(ConsistOf(componentVariables))
		Expect(described.Version()).To(Equal("v0.1.0"))

		By("running the clusterctl binary the README tells users to build (hack/clusterctl.sh) with --describe")
		clusterctlPath, err := exec.Command("../../hack/clusterctl.sh").Output()
		Expect(err).NotTo(HaveOccurred(), "building clusterctl: %v", err)
		bin := strings.TrimSpace(string(clusterctlPath))
		describe := exec.Command(bin, "generate", "provider", "--infrastructure", "redfish:v0.1.0", "--describe", "--config", config)
		// No version check against GitHub, no state written to the user's home.
		home := GinkgoT().TempDir()
		describe.Env = append(os.Environ(), "CLUSTERCTL_DISABLE_VERSIONCHECK=true", "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
		out, err := describe.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		Expect(string(out)).To(And(
			ContainSubstring("Name:               redfish"),
			ContainSubstring("Version:            v0.1.0"),
			ContainSubstring("ghcr.io/caprf/cluster-api-provider-redfish:v0.1.0"),
			ContainSubstring("CAPRF_SEED_URL"),
		))

		By("admitting the components into a real API server (server-side apply, dry run; cert-manager kinds aside)")
		Expect(client.IgnoreAlreadyExists(env.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "caprf-system"}}))).To(Succeed())
		skipped := []string{}
		for _, o := range comps.Objs() {
			err := env.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("clusterctl-test"), client.ForceOwnership, client.DryRunAll)
			if o.GroupVersionKind().Group == "cert-manager.io" && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err)) {
				skipped = append(skipped, o.GetKind())
				continue
			}
			Expect(err).NotTo(HaveOccurred(), "%s %s", o.GetKind(), o.GetName())
		}
		Expect(skipped).To(ConsistOf("Issuer", "Issuer", "Certificate", "Certificate", "Certificate"))

		for _, flavor := range []struct {
			name   string
			boot   infrav1.BootMethod
			format string
			extra  []string // variables beyond templateVariables
		}{
			{"", infrav1.BootMethodVirtualMedia, "live-iso", nil}, {"pxe", infrav1.BootMethodPXE, "live-iso", nil},
			{"uefi-http", infrav1.BootMethodUefiHTTP, "live-iso", nil}, {"disk", infrav1.BootMethodVirtualMedia, "raw", []string{"IMAGE_CHECKSUM"}},
		} {
			By("rendering flavor '" + flavor.name + "' the way `clusterctl generate cluster` does and creating it (dry run)")
			ns, err := env.CreateNamespace(ctx, "clusterctl")
			Expect(err).NotTo(HaveOccurred())
			tmpl, err := c.GetClusterTemplate(ctx, clusterctl.GetClusterTemplateOptions{
				ProviderRepositorySource: &clusterctl.ProviderRepositorySourceOptions{InfrastructureProvider: "redfish:v0.1.0", Flavor: flavor.name},
				ClusterName:              "rack1",
				TargetNamespace:          ns.Name,
				KubernetesVersion:        "v1.36.3",
				ControlPlaneMachineCount: ptr.To[int64](3),
				WorkerMachineCount:       ptr.To[int64](2),
			})
			Expect(err).NotTo(HaveOccurred())
			Expect(tmpl.Variables()).To(ConsistOf(append(append([]string{}, templateVariables...), flavor.extra...)))
			yaml, err := tmpl.Yaml()
			Expect(err).NotTo(HaveOccurred())
			Expect(bytes.Contains(yaml, []byte("${"))).To(BeFalse(), "unresolved variable in\n%s", yaml)

			kinds := []string{}
			for _, o := range tmpl.Objs() {
				kinds = append(kinds, o.GetKind())
				Expect(o.GetNamespace()).To(Equal(ns.Name))
				if o.GetKind() == "RedfishMachineTemplate" {
					boot, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "bootMethod")
					Expect(boot).To(Equal(string(flavor.boot)))
					format, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "image", "format")
					Expect(format).To(Equal(flavor.format))
				}
				obj := o.DeepCopy()
				Expect(env.Create(ctx, obj, client.DryRunAll, &client.CreateOptions{Raw: &metav1.CreateOptions{FieldValidation: "Strict"}})).
					To(Succeed(), "%s %s", o.GetKind(), o.GetName())
			}
			Expect(kinds).To(ConsistOf("Cluster", "RedfishCluster", "KubeadmControlPlane", "RedfishMachineTemplate", "MachineDeployment", "RedfishMachineTemplate", "KubeadmConfigTemplate"))
		}
	})
})
