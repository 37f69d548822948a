package maintenance

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

func readyHost(name string) *infrav1.RedfishHost {
	h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	h.Status.State = infrav1.HostStateProvisioned
	h.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}
	return h
}

func approvedOn(name, host string, created time.Time) *expv1.RedfishMaintenance {
	return &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(created)},
		Spec:   expv1.RedfishMaintenanceSpec{HostName: host, Policy: expv1.Enforced},
		Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageApproved}}
}

// mdWorkers is a MachineDeployment of replicas and its running Machines (running of them with a
// Node).
func mdWorkers(md string, replicas, running int) []client.Object {
	out := []client.Object{&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: md},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: "c-" + md, Replicas: ptr.To(int32(replicas))}}}
	for i := range running {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: md + "-" + string(rune('a'+i)), UID: types.UID(md + "-" + string(rune('a'+i))),
			Labels: map[string]string{clusterv1.MachineDeploymentNameLabel: md}}, Spec: clusterv1.MachineSpec{ClusterName: "c-" + md}}
		m.Status.Phase = string(clusterv1.MachinePhaseRunning)
		m.Status.NodeRef = clusterv1.MachineNodeReference{Name: m.Name}
		out = append(out, m)
	}
	return out
}

// A maintenance its own MachineDeployment refuses (a replica stuck waiting for a host) steps out of
// its policy's line with a reason of its own: another cluster's maintenance behind it starts.
func TestAMaintenanceRefusedByItsMachineDeploymentDoesNotHoldThePolicysLine(t *testing.T) {
	now := time.Now()
	short := approvedOn("m-short", "h-short", now.Add(-time.Hour))
	other := approvedOn("m-other", "h-other", now)
	objs := []client.Object{readyHost("h-short"), readyHost("h-other"), short, other,
		&expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "all"},
			Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}}}
	objs = append(objs, mdWorkers("short", 2, 1)...)
	objs = append(objs, mdWorkers("other", 3, 3)...)
	c := apiWorld(t, objs...)
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now}
	machine := func(name string) *clusterv1.Machine {
		m := &clusterv1.Machine{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	decide := func(m *expv1.RedfishMaintenance, host, on string) (bool, string) {
		t.Helper()
		mc := machine(on)
		m.Status.Machine, m.Status.MachineUID, m.Status.MachineDeployment = mc.Name, string(mc.UID), mc.Labels[clusterv1.MachineDeploymentNameLabel]
		h := &infrav1.RedfishHost{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: host}, h); err != nil {
			t.Fatal(err)
		}
		ok, reason, msg, _, err := r.gateOpen(context.Background(), c, m, h, mc)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			r.waiting(m, reason, "%s", msg)
			if err := c.Status().Update(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		return ok, reason + ": " + msg
	}
	if ok, why := decide(short, "h-short", "short-a"); ok {
		t.Fatal("a MachineDeployment already short let its maintenance take another replica")
	} else if conditions.GetReason(short, infrav1.ReadyCondition) != WaitingForMachineDeploymentReason {
		t.Errorf("refused with %q: want reason %s", why, WaitingForMachineDeploymentReason)
	}
	if ok, why := decide(other, "h-other", "other-a"); !ok {
		t.Errorf("another cluster's maintenance waits behind one its MachineDeployment refuses: %s", why)
	}
}

// Hosts no policy selects: one held at a time in the namespace, a failed maintenance's host
// included (it stays out of service until the maintenance is deleted).
func TestTheDefaultBudgetCountsAFailedMaintenancesHost(t *testing.T) {
	failed := approvedOn("m-failed", "h1", time.Now().Add(-time.Hour))
	failed.Status.Stage = expv1.StageFailed
	next := approvedOn("m-next", "h2", time.Now())
	c := apiWorld(t, readyHost("h1"), readyHost("h2"), failed, next)
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now}
	h := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h2"}, h); err != nil {
		t.Fatal(err)
	}
	ok, reason, msg, _, err := r.gateOpen(context.Background(), c, next, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok || reason != WaitingForBudgetReason {
		t.Errorf("gate %v (%s: %s) with host h1 held by a failed maintenance: want WaitingForBudget", ok, reason, msg)
	}
}
