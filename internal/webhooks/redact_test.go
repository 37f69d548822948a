package webhooks

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// A URL typed without its scheme or host, but with credentials in it (admin:pw@host/x.iso), is
// refused without the password in the error: the error reaches the client, the API server's
// audit log and whatever records admission failures. Found by FuzzWebhookAdmission.
func TestARefusedURLNeverEchoesItsPassword(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "h1"}}).Build()
	const pw = "hunter2"
	for _, u := range []string{"admin:" + pw + "@images.example/x.iso", "https:admin:" + pw + "@images.example/x.iso", ":" + pw + "@"} {
		m := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "m"}, Spec: infrav1.RedfishMachineSpec{Image: &infrav1.Image{URL: u}}}
		mt := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "mt"}, Spec: expv1.RedfishMaintenanceSpec{HostName: "h1", Reason: "r", Requestor: "ops",
			Tasks: []expv1.MaintenanceTask{{BootImage: &expv1.BootImage{URL: u}}}}}
		// A checksum that is neither a digest nor a URL (checksum URLs carry credentials too).
		sum := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "sum"},
			Spec: infrav1.RedfishMachineSpec{Image: &infrav1.Image{URL: "https://images.example/os.raw", Checksum: u}}}
		for _, tc := range []struct {
			v   any
			obj client.Object
		}{{&Machine{Reader: c}, m}, {&Maintenance{Reader: c}, mt}, {&Machine{Reader: c}, sum}} {
			err := validateCreate(t.Context(), tc.v, tc.obj)
			if err == nil {
				t.Errorf("%s with %q admitted", tc.obj.GetName(), u)
				continue
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("%s with %q: the error repeats the password: %v", tc.obj.GetName(), u, err)
			}
		}
	}
}
