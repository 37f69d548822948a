package maintenanceset

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

func world(t *testing.T, canary *expv1.MaintenanceCanary, hosts ...string) (*Reconciler, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := expv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{&expv1.RedfishMaintenanceSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fw", UID: "set-uid"},
		Spec: expv1.RedfishMaintenanceSetSpec{HostSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "a"}},
			Template: expv1.MaintenanceTemplate{Reason: "r", Requestor: "q", Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}},
			Canary:   canary}}}
	for _, h := range hosts {
		objs = append(objs, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: h, Labels: map[string]string{"fleet": "a"}}})
	}
	objs = append(objs, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other"}})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&expv1.RedfishMaintenanceSet{}, &expv1.RedfishMaintenance{}).Build()
	return &Reconciler{Client: c}, c
}

func reconcileSet(t *testing.T, r *Reconciler) *expv1.RedfishMaintenanceSet {
	t.Helper()
	key := client.ObjectKey{Namespace: "ns", Name: "fw"}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	s := &expv1.RedfishMaintenanceSet{}
	if err := r.Client.Get(context.Background(), key, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func setStage(t *testing.T, c client.Client, host string, stage expv1.MaintenanceStage) {
	t.Helper()
	m := &expv1.RedfishMaintenance{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: MaintenanceName("fw", host)}, m); err != nil {
		t.Fatal(err)
	}
	m.Status.Stage = stage
	if err := c.Status().Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func maintenances(t *testing.T, c client.Client) []string {
	t.Helper()
	list := &expv1.RedfishMaintenanceList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range list.Items {
		out = append(out, m.Spec.HostName)
	}
	return out
}

func TestACanaryThatFailsStopsTheRestEvenWhenApproved(t *testing.T) {
	r, c := world(t, &expv1.MaintenanceCanary{Count: ptr.To[int32](1), Approved: true}, "h1", "h2", "h3")
	s := reconcileSet(t, r)
	if got := maintenances(t, c); len(got) != 1 || got[0] != "h1" || s.Status.Phase != expv1.SetPhaseCanary {
		t.Fatalf("maintenances %v, phase %s: want only the canary h1", got, s.Status.Phase)
	}
	setStage(t, c, "h1", expv1.StageFailed)
	s = reconcileSet(t, r)
	if got := maintenances(t, c); len(got) != 1 || s.Status.Phase != expv1.SetPhaseFailed {
		t.Fatalf("maintenances %v, phase %s: a failed canary must stop the rest", got, s.Status.Phase)
	}
	if s.Status.Counts != (expv1.MaintenanceSetCounts{NotStarted: 2, Failed: 1}) || s.Status.Hosts != 3 {
		t.Errorf("counts %+v of %d hosts", s.Status.Counts, s.Status.Hosts)
	}
}

func TestTheRestWaitsForTheCanaryToCompleteAndForTheApproval(t *testing.T) {
	r, c := world(t, &expv1.MaintenanceCanary{Count: ptr.To[int32](2)}, "h1", "h2", "h3")
	reconcileSet(t, r)
	setStage(t, c, "h1", expv1.StageCompleted)
	if s := reconcileSet(t, r); len(maintenances(t, c)) != 2 || s.Status.Phase != expv1.SetPhaseCanary {
		t.Fatalf("phase %s with one canary of two done", s.Status.Phase)
	}
	setStage(t, c, "h2", expv1.StageCompleted)
	if s := reconcileSet(t, r); len(maintenances(t, c)) != 2 || s.Status.Phase != expv1.SetPhaseWaitingForApproval {
		t.Fatalf("phase %s, %d maintenances: want the rest held for the approval", s.Status.Phase, len(maintenances(t, c)))
	}
	s := &expv1.RedfishMaintenanceSet{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "fw"}, s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Canary.Approved = true
	if err := c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	s = reconcileSet(t, r)
	if got := maintenances(t, c); len(got) != 3 || s.Status.Phase != expv1.SetPhaseRollingOut {
		t.Fatalf("maintenances %v, phase %s after the approval", got, s.Status.Phase)
	}
	m := &expv1.RedfishMaintenance{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: MaintenanceName("fw", "h3")}, m); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(m, s) || m.Labels[SetLabel] != "fw" {
		t.Errorf("maintenance of h3 not owned by the set: %+v", m.ObjectMeta)
	}
}

// A maintenance deleted by hand is created again while its host is selected; a host no longer
// selected gets none, and its started maintenance still counts.
func TestTheSetKeepsOneMaintenancePerSelectedHost(t *testing.T) {
	r, c := world(t, nil, "h1", "h2")
	reconcileSet(t, r)
	m := &expv1.RedfishMaintenance{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: MaintenanceName("fw", "h1")}, m); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	h2 := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h2"}, h2); err != nil {
		t.Fatal(err)
	}
	h2.Labels = nil
	if err := c.Update(context.Background(), h2); err != nil {
		t.Fatal(err)
	}
	s := reconcileSet(t, r)
	if got := maintenances(t, c); len(got) != 2 {
		t.Errorf("maintenances %v: want h1's created again and h2's kept", got)
	}
	if s.Status.Hosts != 2 || s.Status.Counts.Waiting != 2 {
		t.Errorf("hosts %d, counts %+v", s.Status.Hosts, s.Status.Counts)
	}
}

// A canary selector that picks no selected host starts nothing (it would let every host go at
// once); a maintenance of another owner holding a set's name is reported, never taken over.
func TestACanaryOfNoHostStartsNothingAndATakenNameIsReported(t *testing.T) {
	r, c := world(t, &expv1.MaintenanceCanary{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "none"}}, Approved: true}, "h1", "h2")
	if s := reconcileSet(t, r); len(maintenances(t, c)) != 0 || conditions.GetReason(s, infrav1.ReadyCondition) != NoCanaryReason {
		t.Fatalf("maintenances %v, %s: want none and %s", maintenances(t, c), conditions.GetReason(s, infrav1.ReadyCondition), NoCanaryReason)
	}
	r, c = world(t, nil, "h1", "h2")
	if err := c.Create(context.Background(), &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: MaintenanceName("fw", "h1")},
		Spec: expv1.RedfishMaintenanceSpec{HostName: "h1", Reason: "someone else's", Requestor: "dc-ops"}}); err != nil {
		t.Fatal(err)
	}
	s := reconcileSet(t, r)
	if got := conditions.GetMessage(s, infrav1.ReadyCondition); conditions.GetReason(s, infrav1.ReadyCondition) != NameTakenReason || !strings.Contains(got, "fw-h1") {
		t.Errorf("Ready %s: %s; want %s naming fw-h1", conditions.GetReason(s, infrav1.ReadyCondition), got, NameTakenReason)
	}
	m := &expv1.RedfishMaintenance{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "fw-h1"}, m); err != nil || m.Spec.Reason != "someone else's" || metav1.IsControlledBy(m, s) {
		t.Errorf("the other maintenance was changed or adopted: %+v (%v)", m.ObjectMeta, err)
	}
}

// A set whose maintenances fail (a firmware the BMCs reject) stops at maxFailures: the maintenances
// not started yet are paused, out of the budgets' line; once the failed one completes on a retry,
// the pauses the set made are lifted.
func TestASetStopsAtMaxFailuresAndGoesOnWhenTheFailureIsResolved(t *testing.T) {
	r, c := world(t, nil, "h1", "h2", "h3", "h4")
	reconcileSet(t, r)
	// h1's task failed its retries: it stays InMaintenance, holding its host, until spec.retry.
	m1 := &expv1.RedfishMaintenance{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: MaintenanceName("fw", "h1")}, m1); err != nil {
		t.Fatal(err)
	}
	m1.Status.Stage, m1.Status.Tasks = expv1.StageInMaintenance, []expv1.MaintenanceTaskStatus{{State: expv1.TaskFailed}}
	if err := c.Status().Update(context.Background(), m1); err != nil {
		t.Fatal(err)
	}
	setStage(t, c, "h2", expv1.StageApproved)
	// A person paused h4's maintenance: the set leaves that pause to the person.
	m4 := &expv1.RedfishMaintenance{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: MaintenanceName("fw", "h4")}, m4); err != nil {
		t.Fatal(err)
	}
	m4.Annotations = map[string]string{"cluster.x-k8s.io/paused": ""}
	if err := c.Update(context.Background(), m4); err != nil {
		t.Fatal(err)
	}
	s := reconcileSet(t, r)
	if s.Status.Phase != expv1.SetPhaseFailed || conditions.GetReason(s, infrav1.ReadyCondition) != MaxFailuresReason {
		t.Fatalf("phase %s, %s: want Failed, %s after one failure (maxFailures default 1)", s.Status.Phase, conditions.GetMessage(s, infrav1.ReadyCondition), MaxFailuresReason)
	}
	paused := func() []string {
		list := &expv1.RedfishMaintenanceList{}
		if err := c.List(context.Background(), list); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range list.Items {
			if _, ok := m.Annotations["cluster.x-k8s.io/paused"]; ok {
				out = append(out, m.Spec.HostName)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := paused(); !slices.Equal(got, []string{"h2", "h3", "h4"}) {
		t.Fatalf("paused %v: want the three not started (h2, h3, h4)", got)
	}
	setStage(t, c, "h1", expv1.StageCompleted)
	if s := reconcileSet(t, r); s.Status.Phase != expv1.SetPhaseRollingOut {
		t.Errorf("phase %s once the failure was resolved: want RollingOut", s.Status.Phase)
	}
	if got := paused(); !slices.Equal(got, []string{"h4"}) {
		t.Errorf("paused %v: the set lifts the pauses it made (h2, h3), and only those (h4's is a person's)", got)
	}
}
