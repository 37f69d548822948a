package webhooks

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/install"
)

// Fuzz targets: their seed corpora run with every `go test`; `go test -fuzz=FuzzX
// ./internal/webhooks` explores (see docs/fuzzing.md).

// fuzzSecret is the password the corpus puts in URLs (BMC address, image, checksum file,
// firmware image): no admission error may repeat it.
const fuzzSecret = "Fuzz5ecret"

// passwordMarker finds fuzzSecret within a URL's password (between the userinfo's ':' and '@').
var passwordMarker = regexp.MustCompile(`:[^"/@:]*` + fuzzSecret + `[^"/@]*@`)

// admissionKinds are the objects our webhooks admit, each with how its spec is read and validated.
var admissionKinds = []struct {
	kind string
	new  func() client.Object
	spec func(client.Object) any
}{
	{"RedfishHost", func() client.Object { return &infrav1.RedfishHost{} }, func(o client.Object) any { return &o.(*infrav1.RedfishHost).Spec }},
	{"RedfishMachine", func() client.Object { return &infrav1.RedfishMachine{} }, func(o client.Object) any { return &o.(*infrav1.RedfishMachine).Spec }},
	{"RedfishMachineTemplate", func() client.Object { return &infrav1.RedfishMachineTemplate{} }, func(o client.Object) any { return &o.(*infrav1.RedfishMachineTemplate).Spec.Template.Spec }},
	{"RedfishJob", func() client.Object { return &infrav1.RedfishJob{} }, func(o client.Object) any { return &o.(*infrav1.RedfishJob).Spec }},
	{"RedfishMaintenance", func() client.Object { return &expv1.RedfishMaintenance{} }, func(o client.Object) any { return &o.(*expv1.RedfishMaintenance).Spec }},
	{"RedfishMaintenancePolicy", func() client.Object { return &expv1.RedfishMaintenancePolicy{} }, func(o client.Object) any { return &o.(*expv1.RedfishMaintenancePolicy).Spec }},
	{"RedfishMaintenanceSet", func() client.Object { return &expv1.RedfishMaintenanceSet{} }, func(o client.Object) any { return &o.(*expv1.RedfishMaintenanceSet).Spec }},
}

// Any spec, for every webhook: admission answers without panicking; its errors never repeat a
// password put in a URL; an object it admitted is admitted again unchanged (GitOps re-applies it,
// controllers add finalizers: nothing admitted is locked out); and a disk image it admitted gives
// a deploy script bash parses.
func FuzzWebhookAdmission(f *testing.F) {
	secretURL := "https://ops:" + fuzzSecret + "@images.example"
	for _, s := range []struct {
		kind int
		spec string
	}{
		{0, `{"bmc":{"address":"redfish://10.0.0.5/redfish/v1/Systems/1","credentialsName":"bmc"},"bootMACAddress":"52:54:00:00:00:01"}`},
		{0, `{"bmc":{"address":"redfish://root:` + fuzzSecret + `@10.0.0.5","credentialsName":"bmc"}}`},
		{0, `{"bmc":{"address":"redfish://10.0.0.5","credentialsName":"bmc"},"serviceBoot":{"image":"` + secretURL + `/svc.iso","requestor":"ops"}}`},
		{1, `{"image":{"url":"https://images.example/ubuntu.qcow2","checksum":"` + strings.Repeat("ab", 32) + `"}}`},
		{1, `{"image":{"url":"` + secretURL + `/os.raw","checksum":"` + secretURL + `/SHA256SUMS"}}`},
		{1, `{"image":{"url":"https://images.example/live.iso"},"bootMethod":"PXE"}`},
		{2, `{"image":{"url":"https://images.example/os.img","format":"raw","checksum":"x"}}`},
		{2, `{"image":{"url":"https://images.example/os.raw","checksumType":"sha512","checksum":"` + strings.Repeat("0", 128) + `","caBundleName":"ca"}}`},
		{3, `{"hostName":"h1","tasks":[{"power":"Off"},{"insertMedia":{"url":"` + secretURL + `/x.iso"}}]}`},
		{4, `{"hostName":"h1","reason":"firmware","requestor":"ops","tasks":[{"firmware":{"component":"BIOS","plan":[{"version":"2.1","imageURL":"` + secretURL + `/bios.bin"}]}}]}`},
		{4, `{"hostName":"h1","reason":"bios","requestor":"ops","tasks":[{"biosSettings":{"attributes":{"SriovGlobalEnable":"Enabled"}}}]}`},
		{4, `{"hostName":"h1","reason":"os","requestor":"ops","tasks":[{"bootImage":{"url":"` + secretURL + `/rescue.iso"}}]}`},
		{5, `{"windows":[{"start":"0 2 * * 6","duration":"4h","timeZone":"Europe/Berlin"}],"maxUnavailable":"10%"}`},
		{5, `{"windows":[{"start":"0 0 30 2 *","duration":"1h"}],"maxParallel":0}`},
		{6, `{"hostSelector":{"matchLabels":{"rack":"r1"}},"template":{"reason":"firmware","requestor":"ops","tasks":[{"firmware":{"component":"BMC","plan":[{"version":"1","imageURL":"` + secretURL + `/bmc.bin"}]}}]}}`},
	} {
		// Each seed names real fields: json.Unmarshal drops unknown ones, and a seed that says
		// nothing would seed nothing.
		d := json.NewDecoder(strings.NewReader(s.spec))
		d.DisallowUnknownFields()
		if err := d.Decode(admissionKinds[s.kind].spec(admissionKinds[s.kind].new())); err != nil {
			f.Fatalf("seed %s: %v", s.spec, err)
		}
		f.Add(uint8(s.kind), []byte(s.spec))
	}
	validators := testValidators(f)
	f.Fuzz(func(t *testing.T, which uint8, spec []byte) {
		k := admissionKinds[int(which)%len(admissionKinds)]
		obj := k.new()
		obj.SetNamespace("fleet")
		obj.SetName("fuzzed")
		if json.Unmarshal(spec, k.spec(obj)) != nil {
			return
		}
		ctx := admission.NewContextWithRequest(t.Context(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Update}})
		err := validateCreate(ctx, validators[k.kind], obj)
		if err != nil {
			// A password is what stands between a URL's ':' and '@' (in the decoded spec: JSON may
			// escape either); the marker anywhere else (a URL that is only the marker, a path) is
			// no secret and may be quoted back.
			// Where the marker stands elsewhere too (a URL that is only the marker), an error
			// quoting it is a leak only if it quotes it with the '@' that follows a password.
			decoded, _ := json.Marshal(k.spec(obj))
			elsewhere := strings.Contains(string(passwordMarker.ReplaceAll(decoded, nil)), fuzzSecret)
			if passwordMarker.Match(decoded) && strings.Contains(err.Error(), fuzzSecret) && (!elsewhere || strings.Contains(err.Error(), fuzzSecret+"@")) {
				t.Fatalf("%s %s refused with the URL's password in the error: %v", k.kind, spec, err)
			}
			return
		}
		if err := validateUpdate(ctx, validators[k.kind], obj, obj.DeepCopyObject().(client.Object)); err != nil {
			t.Fatalf("%s %s was admitted, and then refused unchanged: %v", k.kind, spec, err)
		}
		if m, ok := obj.(*infrav1.RedfishMachine); ok && m.Spec.Image != nil && m.Spec.Image.EffectiveFormat().DiskImage() {
			script, err := install.Script(install.Params{ImageURL: m.Spec.Image.URL, Format: m.Spec.Image.EffectiveFormat(),
				Checksum: m.Spec.Image.Checksum, ChecksumType: m.Spec.Image.EffectiveChecksumType(),
				Device: infrav1.RootDevice{WWN: "0x5002538e01000000"}, ReportURL: "https://seed.example/report"})
			if err != nil {
				t.Fatalf("admitted image %s: no deploy script: %v", spec, err)
			}
			cmd := exec.CommandContext(t.Context(), "bash", "-n")
			cmd.Stdin = strings.NewReader(string(script))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("admitted image %s: bash cannot parse the deploy script: %v %s", spec, err, out)
			}
		}
	})
}

func validateCreate(ctx context.Context, v any, obj client.Object) error {
	var err error
	switch o := obj.(type) {
	case *infrav1.RedfishHost:
		_, err = v.(*Host).ValidateCreate(ctx, o)
	case *infrav1.RedfishMachine:
		_, err = v.(*Machine).ValidateCreate(ctx, o)
	case *infrav1.RedfishMachineTemplate:
		_, err = v.(*MachineTemplate).ValidateCreate(ctx, o)
	case *infrav1.RedfishJob:
		_, err = v.(*Job).ValidateCreate(ctx, o)
	case *expv1.RedfishMaintenance:
		_, err = v.(*Maintenance).ValidateCreate(ctx, o)
	case *expv1.RedfishMaintenancePolicy:
		_, err = v.(*MaintenancePolicy).ValidateCreate(ctx, o)
	case *expv1.RedfishMaintenanceSet:
		_, err = v.(*MaintenanceSet).ValidateCreate(ctx, o)
	}
	return err
}

func validateUpdate(ctx context.Context, v any, old, obj client.Object) error {
	var err error
	switch o := obj.(type) {
	case *infrav1.RedfishHost:
		_, err = v.(*Host).ValidateUpdate(ctx, old.(*infrav1.RedfishHost), o)
	case *infrav1.RedfishMachine:
		_, err = v.(*Machine).ValidateUpdate(ctx, old.(*infrav1.RedfishMachine), o)
	case *infrav1.RedfishMachineTemplate:
		_, err = v.(*MachineTemplate).ValidateUpdate(ctx, old.(*infrav1.RedfishMachineTemplate), o)
	case *infrav1.RedfishJob:
		_, err = v.(*Job).ValidateUpdate(ctx, old.(*infrav1.RedfishJob), o)
	case *expv1.RedfishMaintenance:
		_, err = v.(*Maintenance).ValidateUpdate(ctx, old.(*expv1.RedfishMaintenance), o)
	case *expv1.RedfishMaintenancePolicy:
		_, err = v.(*MaintenancePolicy).ValidateUpdate(ctx, old.(*expv1.RedfishMaintenancePolicy), o)
	case *expv1.RedfishMaintenanceSet:
		_, err = v.(*MaintenanceSet).ValidateUpdate(ctx, old.(*expv1.RedfishMaintenanceSet), o)
	}
	return err
}

// testValidators are the webhooks' validators over a fake client holding a BMC Secret and the
// host h1 of namespace fleet.
func testValidators(tb testing.TB) map[string]any {
	tb.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			tb.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "bmc"}, Data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}},
		&infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "h1"}},
	).Build()
	return map[string]any{
		"RedfishHost": &Host{Reader: c}, "RedfishMachine": &Machine{Reader: c}, "RedfishMachineTemplate": &MachineTemplate{},
		"RedfishJob": &Job{Reader: c}, "RedfishMaintenance": &Maintenance{Reader: c},
		"RedfishMaintenancePolicy": &MaintenancePolicy{}, "RedfishMaintenanceSet": &MaintenanceSet{},
	}
}
