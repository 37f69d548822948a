package maintenance

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// When the budget moves, the maintenance each policy starts next is woken (and one no policy
// governs), not every waiting one, and none that waits for something else than the budget.
func TestTheBudgetMovingWakesTheMaintenanceThatGoesNextInEachPolicy(t *testing.T) {
	base := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	host := func(name, rack string) client.Object {
		return &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"rack": rack}}}
	}
	maintenance := func(name, host string, age int, stage expv1.MaintenanceStage, reason string) *expv1.RedfishMaintenance {
		m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(base.Add(-time.Duration(age) * time.Minute))},
			Spec: expv1.RedfishMaintenanceSpec{HostName: host}, Status: expv1.RedfishMaintenanceStatus{Stage: stage}}
		if reason != "" {
			m.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason}}
		}
		return m
	}
	one := intstr.FromInt32(1)
	policy := func(name, rack string) client.Object {
		return &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &one, HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": rack}}}}
	}
	objs := []client.Object{
		host("a", "r1"), host("b", "r1"), host("c", "r1"), host("d", "r2"), host("e", "r2"), host("f", "r3"), host("g", "r3"),
		policy("p1", "r1"), policy("p2", "r2"),
		maintenance("m-a", "a", 9, expv1.StageDraining, DrainingReason),
		maintenance("m-b", "b", 5, expv1.StageApproved, WaitingForBudgetReason), // r1's next: older than m-c
		maintenance("m-c", "c", 1, expv1.StageApproved, WaitingForBudgetReason),
		maintenance("m-d", "d", 8, expv1.StageApproved, RolloutInProgressReason), // waits for its rollout, not the budget
		maintenance("m-e", "e", 2, expv1.StageApproved, ""),                      // r2's next
		maintenance("m-f", "f", 3, expv1.StageApproved, WaitingForBudgetReason),  // no policy: one at a time
		maintenance("m-g", "g", 4, expv1.StageInMaintenance, WaitingForCompletionReason),
	}
	r := &Reconciler{Client: apiWorld(t, objs...), Now: time.Now}
	var got []string
	for _, req := range r.nextInLine(context.Background(), "ns") {
		got = append(got, req.Name)
	}
	slices.Sort(got)
	if want := []string{"m-b", "m-e", "m-f"}; !slices.Equal(got, want) {
		t.Errorf("woken %v, want %v (the next of r1, of r2, and of the hosts no policy governs)", got, want)
	}

	// Nothing waits for the budget: nothing is woken.
	r = &Reconciler{Now: time.Now, Client: apiWorld(t, host("a", "r1"), policy("p1", "r1"), maintenance("m-a", "a", 1, expv1.StageDraining, DrainingReason))}
	if got := r.nextInLine(context.Background(), "ns"); len(got) != 0 {
		t.Errorf("woken %v with no maintenance waiting", got)
	}
}

// What moves a budget wakes the next in line through the controller's watches: a maintenance
// changing stage or going, a host becoming Ready or not, a Machine starting or stopping to run;
// other changes of the same objects do not (each would list the fleet).
func TestOnlyChangesThatMoveABudgetWakeTheNextInLine(t *testing.T) {
	m := &expv1.RedfishMaintenance{Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageInMaintenance}}
	completed := m.DeepCopy()
	completed.Status.Stage = expv1.StageCompleted
	relabelled := m.DeepCopy()
	relabelled.Labels = map[string]string{"x": "y"}
	announced := m.DeepCopy()
	announced.Status.Stage = expv1.StageAnnounced
	approved := m.DeepCopy()
	approved.Status.Stage = expv1.StageApproved
	m0 := m.DeepCopy()
	m0.Status.Stage = expv1.StagePending
	reprioritised := approved.DeepCopy()
	reprioritised.Spec.Priority = 5
	rollingOut := approved.DeepCopy()
	rollingOut.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: RolloutInProgressReason}}
	md := &clusterv1.MachineDeployment{}
	md.Spec.Replicas = ptr.To[int32](3)
	resized := md.DeepCopy()
	resized.Spec.Replicas = ptr.To[int32](4)
	wider := md.DeepCopy()
	wider.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	relabelledMD := md.DeepCopy()
	relabelledMD.Labels = map[string]string{"x": "y"}
	deleting := m.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}

	h := &infrav1.RedfishHost{}
	h.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse}}
	ready := h.DeepCopy()
	ready.Status.Conditions[0].Status = metav1.ConditionTrue
	powered := h.DeepCopy()
	powered.Status.PowerState = "On"
	// A spare claimed by a MachineDeployment's Machine: Available and Ready, then provisioning
	// (not Ready; not down if it replaces a Machine a maintenance took), then its boot failed.
	spare := ready.DeepCopy()
	spare.Status.State = infrav1.HostStateAvailable
	spare.Status.Conditions = append(spare.Status.Conditions, metav1.Condition{Type: infrav1.BMCReachableCondition, Status: metav1.ConditionTrue})
	booting := spare.DeepCopy()
	booting.Status.State = infrav1.HostStateProvisioning
	booting.Status.Conditions[0].Status = metav1.ConditionFalse
	booting.Status.Claim = &infrav1.HostClaim{Owner: &infrav1.ObjectRef{Kind: "MachineDeployment", Name: "md"}, Since: metav1.Now()}
	bootingUnreachable := booting.DeepCopy()
	bootingUnreachable.Status.Conditions[1].Status = metav1.ConditionFalse
	bootFailed := booting.DeepCopy()
	bootFailed.Status.Conditions = append(bootFailed.Status.Conditions, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionFalse})
	booted := booting.DeepCopy()
	booted.Status.State = infrav1.HostStateProvisioned
	booted.Status.Conditions[0].Status = metav1.ConditionTrue

	mc := &clusterv1.Machine{}
	mc.Status.Phase = string(clusterv1.MachinePhaseProvisioned)
	running := mc.DeepCopy()
	running.Status.Phase, running.Status.NodeRef = string(clusterv1.MachinePhaseRunning), clusterv1.MachineNodeReference{Name: "n"}
	runningDeleted := running.DeepCopy()
	runningDeleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	relabelledRunning := running.DeepCopy()
	relabelledRunning.Labels = map[string]string{"x": "y"}

	for _, c := range []struct {
		name      string
		p         predicate.Funcs
		old, new  client.Object
		wantsWake bool
	}{
		{"maintenance completed", stageChanged, m, completed, true},
		{"maintenance deleted", stageChanged, m, deleting, true},
		{"maintenance relabelled", stageChanged, m, relabelled, false},
		{"maintenance joined the line", stageChanged, announced, approved, true},
		{"maintenance announced", stageChanged, m0, announced, false},
		{"maintenance reprioritised", stageChanged, approved, reprioritised, true},
		{"waiting maintenance left the line (its rollout began)", stageChanged, approved, rollingOut, true},
		{"MachineDeployment resized", shareChanged, md, resized, true},
		{"MachineDeployment rollout maxUnavailable raised", shareChanged, md, wider, true},
		{"MachineDeployment relabelled", shareChanged, md, relabelledMD, false},
		{"host became Ready", downChanged, h, ready, true},
		{"host stopped being Ready", downChanged, ready, h, true},
		{"host powered on", downChanged, h, powered, false},
		{"spare began provisioning for its claim", downChanged, spare, booting, true},
		{"provisioning host lost its BMC", downChanged, booting, bootingUnreachable, true},
		{"provisioning host's boot failed", downChanged, booting, bootFailed, true},
		{"provisioned host became Ready", downChanged, booting, booted, true},
		{"Machine running", runningChanged, mc, running, true},
		{"running Machine deleted", runningChanged, running, runningDeleted, true},
		{"running Machine relabelled", runningChanged, running, relabelledRunning, false},
	} {
		if got := c.p.Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.new}); got != c.wantsWake {
			t.Errorf("%s: wakes %t, want %t", c.name, got, c.wantsWake)
		}
	}
	if !stageChanged.Delete(event.DeleteEvent{Object: m}) || !downChanged.Delete(event.DeleteEvent{Object: h}) || !runningChanged.Delete(event.DeleteEvent{Object: running}) {
		t.Error("an object that went does not wake the next in line")
	}
	if stageChanged.Create(event.CreateEvent{Object: m}) {
		t.Error("a new maintenance wakes the others (it is reconciled itself)")
	}
}

// A budget with room for two lets the first two in line start at once (the third waits for
// them), and wakes both; once they are out, the third waits for the budget itself.
func TestTheFirstInLineStartAsManyAtOnceAsTheBudgetHasRoomFor(t *testing.T) {
	ctx := context.Background()
	two := intstr.FromInt32(2)
	objs := []client.Object{&expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &two}}}
	hosts := map[string]*infrav1.RedfishHost{}
	for i, name := range []string{"a", "b", "c", "d"} {
		h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		h.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue}}
		hosts[name] = h
		objs = append(objs, h)
		if name != "d" {
			objs = append(objs, &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-" + name,
				CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 2, 8, i, 0, 0, time.UTC))},
				Spec: expv1.RedfishMaintenanceSpec{HostName: name}, Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageApproved}})
		}
	}
	c := apiWorld(t, objs...)
	r := &Reconciler{Client: c, PollInterval: time.Second, Now: time.Now}
	passes := func() map[string]bool {
		out := map[string]bool{}
		for _, name := range []string{"a", "b", "c"} {
			m := &expv1.RedfishMaintenance{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "m-" + name}, m); err != nil {
				t.Fatal(err)
			}
			if m.Status.Stage != expv1.StageApproved {
				continue
			}
			ok, _, msg, after, err := r.gateOpen(ctx, c, m, hosts[name], nil)
			if err != nil {
				t.Fatal(err)
			}
			out[m.Name] = ok
			if !ok && msg == "" {
				t.Errorf("%s waits without a reason", m.Name)
			}
			// Woken when the budget moves: its own look is only a safety net.
			if !ok && after != 10*r.PollInterval {
				t.Errorf("%s looks again after %s, want the safety net's %s", m.Name, after, 10*r.PollInterval)
			}
		}
		return out
	}
	if got := passes(); !got["m-a"] || !got["m-b"] || got["m-c"] {
		t.Errorf("passes %v, want m-a and m-b (room for 2), not m-c", got)
	}
	var woken []string
	for _, req := range r.nextInLine(ctx, "ns") {
		woken = append(woken, req.Name)
	}
	slices.Sort(woken)
	if !slices.Equal(woken, []string{"m-a", "m-b"}) {
		t.Errorf("woken %v, want m-a and m-b", woken)
	}
	drain := func(name string) {
		m := &expv1.RedfishMaintenance{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, m); err != nil {
			t.Fatal(err)
		}
		m.Status.Stage = expv1.StageDraining
		if err := c.Status().Update(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	drain("m-a")
	if got := passes(); !got["m-b"] || got["m-c"] {
		t.Errorf("with m-a out: passes %v, want m-b (first in line, one place left), not m-c", got)
	}
	drain("m-b")
	if got := passes(); got["m-c"] {
		t.Error("m-c passed with two hosts out under maxUnavailable 2")
	}
	// m-a done, m-c's host down: two hosts unavailable under maxUnavailable 2, and m-c, whose host
	// is one of them, costs the budget nothing more.
	hosts["c"].Status.Conditions[0].Status = metav1.ConditionFalse
	if err := c.Update(ctx, hosts["c"]); err != nil {
		t.Fatal(err)
	}
	done := &expv1.RedfishMaintenance{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "m-a"}, done); err != nil {
		t.Fatal(err)
	}
	done.Status.Stage = expv1.StageCompleted
	if err := c.Status().Update(ctx, done); err != nil {
		t.Fatal(err)
	}
	if got := passes(); !got["m-c"] {
		t.Error("m-c, whose host is already down, waits for a budget it does not use")
	}
	// maxParallel bounds the room as well; the first in line may always try.
	if got := (budget{maxUnavailable: 5, maxParallel: 3, inMaintenance: 1}).room(); got != 2 {
		t.Errorf("room %d under maxUnavailable 5, maxParallel 3 with 1 in maintenance, want 2", got)
	}
	if got := (budget{maxUnavailable: 2, unavailable: 4, maxParallel: -1}).room(); got != 1 {
		t.Errorf("room %d with the budget spent, want 1 (the first in line tries: its host may cost nothing)", got)
	}
}
