package remediation

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// world is a Machine m1, its RedfishMachine (hostRef h1), the host h1 with the given claim, and
// a remediation of m1 (finalizer already added, host recorded when recorded is set).
func world(t *testing.T, claim *infrav1.HostClaim, recorded bool) (client.Client, *Reconciler) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1"},
		Spec: clusterv1.MachineSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{Kind: "RedfishMachine", Name: "m1", APIGroup: infrav1.GroupVersion.Group}}}
	rm := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1", UID: "rm-uid"}}
	rm.Status.HostRef = "h1"
	h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1"}}
	h.Status.State, h.Status.PowerState, h.Status.Claim = infrav1.HostStateProvisioned, "On", claim
	rr := &infrav1.RedfishRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1", Finalizers: []string{Finalizer}}}
	if recorded {
		rr.Status.Host, rr.Status.Phase = "h1", infrav1.RemediationFencing
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(machine, rm, h, rr).
		WithStatusSubresource(&infrav1.RedfishHost{}, &infrav1.RedfishMachine{}, &infrav1.RedfishRemediation{}).Build()
	return c, &Reconciler{Client: c, APIReader: c, PollInterval: time.Second}
}

func claimOf(uid string) *infrav1.HostClaim {
	return &infrav1.HostClaim{Consumer: infrav1.ObjectRef{APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachine", Namespace: "ns", Name: "x"}, ConsumerUID: uid}
}

func requests(t *testing.T, c client.Client) []infrav1.RebootRequest {
	t.Helper()
	h := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "h1"}, h); err != nil {
		t.Fatal(err)
	}
	return h.Spec.RebootRequests
}

func TestARemediationFencesOnlyAHostItsMachineStillHolds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim *infrav1.HostClaim
		want  int
	}{
		{name: "claimed by the machine: fenced", claim: claimOf("rm-uid"), want: 1},
		{name: "claimed by another machine: left alone", claim: claimOf("other-uid")},
		{name: "no claim (Available): left alone", claim: nil},
		{name: "the machine's claim being released: left alone", claim: func() *infrav1.HostClaim { c := claimOf("rm-uid"); c.Release = true; return c }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, r := world(t, tc.claim, false)
			for range 3 {
				if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "m1"}}); err != nil {
					t.Fatal(err)
				}
			}
			if got := requests(t, c); len(got) != tc.want {
				t.Errorf("reboot requests %+v, want %d", got, tc.want)
			}
		})
	}
}

func TestARemediationWithdrawsItsRequestFromAHostItsMachineLost(t *testing.T) {
	c, r := world(t, claimOf("other-uid"), true)
	h := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "h1"}, h); err != nil {
		t.Fatal(err)
	}
	h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: infrav1.RemediationRequestorPrefix + "m1", Mode: infrav1.RebootModeHard}}
	if err := c.Update(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "m1"}}); err != nil {
		t.Fatal(err)
	}
	if got := requests(t, c); len(got) != 0 {
		t.Errorf("reboot requests %+v: the request on a host the machine no longer holds stays", got)
	}
}
