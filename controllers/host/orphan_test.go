package host

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// A maintenance's power hold is its own by UID: one left by a maintenance gone (its finalizer
// removed by hand) is dropped after the grace period even though another maintenance now has its
// name; the hold of the maintenance that has the name and UID is kept.
func TestAHoldOfAMaintenanceRecreatedUnderItsNameIsAnOrphan(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}, Spec: infrav1.RedfishHostSpec{RebootRequests: []infrav1.RebootRequest{
		{Requestor: infrav1.MaintenanceRequestorPrefix + "fw", RequestorUID: "uid-gone", Mode: infrav1.RebootModeHard},
		{Requestor: infrav1.MaintenanceRequestorPrefix + "psu", RequestorUID: "uid-psu", Mode: infrav1.RebootModeHard},
	}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h,
		&expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fw", UID: "uid-recreated"}},
		&expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "psu", UID: "uid-psu"}}).Build()
	r := &Reconciler{Client: c, APIReader: c, OrphanGracePeriod: 0}
	for range 2 { // the first look starts the grace period, the second ends it
		got := &infrav1.RedfishHost{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(h), got); err != nil {
			t.Fatal(err)
		}
		if _, err := r.dropOrphanedRemediationRequests(context.Background(), got); err != nil {
			t.Fatal(err)
		}
	}
	got := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(h), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.RebootRequests) != 1 || got.Spec.RebootRequests[0].RequestorUID != "uid-psu" {
		t.Errorf("reboot requests %+v: want only psu's (fw's was made by a maintenance that is gone)", got.Spec.RebootRequests)
	}
}

// A lease whose holder is gone (its finalizer removed by hand, or re-created under its name) is
// released after the grace period: it would keep the host from every claim, job and BMC action.
func TestALeaseWhoseHolderIsGoneIsReleased(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	lease := func(uid string) *infrav1.HostLease {
		return &infrav1.HostLease{Holder: infrav1.ObjectRef{APIGroup: expv1.GroupVersion.Group, Kind: "RedfishMaintenance", Namespace: "ns", Name: "fw"}, HolderUID: uid, AcquiredAt: metav1.Now()}
	}
	for uid, kept := range map[string]bool{"uid-fw": true, "uid-gone": false} {
		h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}, Status: infrav1.RedfishHostStatus{Lease: lease(uid)}}
		c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&infrav1.RedfishHost{}).WithObjects(h,
			&expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fw", UID: "uid-fw"}}).Build()
		r := &Reconciler{Client: c, APIReader: c, OrphanGracePeriod: 0}
		for range 2 {
			got := &infrav1.RedfishHost{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(h), got); err != nil {
				t.Fatal(err)
			}
			if _, err := r.dropOrphanedLease(context.Background(), got); err != nil {
				t.Fatal(err)
			}
		}
		got := &infrav1.RedfishHost{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(h), got); err != nil {
			t.Fatal(err)
		}
		if (got.Status.Lease != nil) != kept {
			t.Errorf("lease of holder UID %s: %+v, want kept %v", uid, got.Status.Lease, kept)
		}
	}
}

// While a maintenance holds the host's lease, the host's own BMC work (provisioning, a release,
// a power action, a service boot) waits for it.
func TestAHeldLeaseHoldsTheHostsOwnWork(t *testing.T) {
	r := &Reconciler{}
	h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}
	if r.heldBy(h, nil, "release") {
		t.Fatal("a host without a lease or a job is held")
	}
	h.Status.Lease = &infrav1.HostLease{Holder: infrav1.ObjectRef{Kind: "RedfishMaintenance", Name: "fw"}, HolderUID: "u"}
	if !r.heldBy(h, nil, "release") {
		t.Error("a host whose lease a maintenance holds is not held")
	}
}
