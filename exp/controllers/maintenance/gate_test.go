package maintenance

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

func TestWindowsOpenOnlyInsideTheirPeriodInTheirTimeZone(t *testing.T) {
	// Weeknights 22:00-02:00 in Berlin (UTC+1 in January).
	w := []expv1.MaintenanceWindow{{Start: "0 22 * * 1-5", Duration: metav1.Duration{Duration: 4 * time.Hour}, TimeZone: "Europe/Berlin"}}
	for _, tc := range []struct {
		at       string // UTC
		open     bool
		nextOpen string // UTC, when closed
	}{
		{at: "2027-01-05T20:59:00Z", open: false, nextOpen: "2027-01-05T21:00:00Z"}, // Tuesday 21:59 Berlin
		{at: "2027-01-05T21:00:00Z", open: true},                                    // 22:00 Berlin
		{at: "2027-01-06T00:59:00Z", open: true},                                    // 01:59 Berlin, the next day
		{at: "2027-01-06T01:00:00Z", open: false, nextOpen: "2027-01-06T21:00:00Z"}, // 02:00 Berlin: closed
		{at: "2027-01-09T12:00:00Z", open: false, nextOpen: "2027-01-11T21:00:00Z"}, // Saturday: Monday night next
	} {
		now, _ := time.Parse(time.RFC3339, tc.at)
		open, next, err := windowState(w, now)
		if err != nil {
			t.Fatal(err)
		}
		if open != tc.open {
			t.Errorf("at %s open = %v, want %v", tc.at, open, tc.open)
		}
		if !tc.open && next.UTC().Format(time.RFC3339) != tc.nextOpen {
			t.Errorf("at %s next window %s, want %s", tc.at, next.UTC().Format(time.RFC3339), tc.nextOpen)
		}
	}
	if open, _, err := windowState(nil, time.Now()); !open || err != nil {
		t.Errorf("no windows: open %v, %v; want always open", open, err)
	}
	// "@every 1h" (found by FuzzMaintenanceWindow): a delay from whenever it is asked, no start
	// of its own; the window would open an hour after every look at it, so never.
	for _, bad := range []string{"61 * * * *", "0 0 30 2 *", "CRON_TZ=Asia/Tokyo 0 22 * * *", "@every 1h"} {
		if _, _, err := windowState([]expv1.MaintenanceWindow{{Start: bad, Duration: metav1.Duration{Duration: time.Hour}}}, time.Now()); err == nil {
			t.Errorf("schedule %q was read as a window", bad)
		}
	}
}

func TestBudgetCountsHostsUnavailableForAnyReason(t *testing.T) {
	host := func(name string, ready bool, lbl string) infrav1.RedfishHost {
		h := infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rack": lbl}}}
		status := metav1.ConditionFalse
		if ready {
			status = metav1.ConditionTrue
		}
		h.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: status}}
		return h
	}
	hosts := []infrav1.RedfishHost{host("a", true, "r1"), host("b", false, "r1"), host("c", true, "r1"), host("d", true, "r1"), host("e", true, "r2")}
	ms := []expv1.RedfishMaintenance{
		{ObjectMeta: metav1.ObjectMeta{Name: "m-c"}, Spec: expv1.RedfishMaintenanceSpec{HostName: "c"}, Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageInMaintenance}},
		{ObjectMeta: metav1.ObjectMeta{Name: "m-d"}, Spec: expv1.RedfishMaintenanceSpec{HostName: "d"}, Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageApproved}},
		{ObjectMeta: metav1.ObjectMeta{Name: "m-e"}, Spec: expv1.RedfishMaintenanceSpec{HostName: "e"}, Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageDraining}},
	}
	two := intstr.FromInt32(2)
	p := &expv1.RedfishMaintenancePolicy{Spec: expv1.RedfishMaintenancePolicySpec{
		HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"}}, MaxUnavailable: &two}}
	b, names, err := budgetOf(p, fleet{hosts: hosts, ms: ms}, "m-d", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// r1: a, b (not Ready), c (in maintenance), d (approved, waiting: not counted).
	if len(names) != 4 || b.unavailable != 2 || b.inMaintenance != 1 {
		t.Fatalf("budget %+v over %v, want 4 hosts, 2 unavailable, 1 in maintenance", b, names)
	}
	if ok, why := b.allows(false, false); ok {
		t.Errorf("a third unavailable host allowed under maxUnavailable 2")
	} else if why == "" {
		t.Error("no reason given")
	}
	if ok, _ := b.allows(true, false); !ok {
		t.Error("a host that is already unavailable changes nothing, but was refused")
	}
	pct := intstr.FromString("10%") // of 5 hosts: 0.5, at least 1
	p.Spec.MaxUnavailable, p.Spec.HostSelector = &pct, nil
	if b, _, _ := budgetOf(p, fleet{hosts: hosts}, "", time.Now()); b.maxUnavailable != 1 || b.maxParallel != -1 {
		t.Errorf("10%% of %d hosts gives maxUnavailable %d (maxParallel %d), want 1 (no limit)", b.hosts, b.maxUnavailable, b.maxParallel)
	}
	one := intstr.FromInt32(1)
	five := intstr.FromInt32(5)
	p.Spec.MaxUnavailable, p.Spec.MaxParallel = &five, &one
	b, _, _ = budgetOf(p, fleet{hosts: hosts, ms: ms}, "", time.Now())
	if ok, why := b.allows(false, false); ok {
		t.Errorf("maxParallel 1 with two hosts in maintenance allowed a third (%+v)", b)
	} else if why == "" {
		t.Error("no reason given")
	}
	if ok, why := b.allows(false, true); !ok {
		t.Errorf("a second maintenance of a host already in maintenance takes no budget, but was refused: %s", why)
	}
}

func TestClusterSelectorCountsTheClustersHostsAlsoWhileInMaintenance(t *testing.T) {
	ready := []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue}}
	host := func(name, cluster string) infrav1.RedfishHost {
		h := infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Name: name}}
		h.Status.Conditions = ready
		if cluster != "" {
			h.Status.Claim = &infrav1.HostClaim{ClusterName: cluster}
		}
		return h
	}
	f := fleet{
		// "released" serves no Cluster any more: the maintenance took it out of prod-a.
		hosts: []infrav1.RedfishHost{host("a1", "prod-a"), host("a2", "prod-a"), host("released", ""), host("b1", "dev-b"), host("spare", "")},
		ms: []expv1.RedfishMaintenance{{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: expv1.RedfishMaintenanceSpec{HostName: "released"},
			Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageInMaintenance, Cluster: "prod-a"}}},
		clusters: map[string]labels.Set{"prod-a": {"tier": "prod"}, "dev-b": {"tier": "dev"}},
	}
	p := &expv1.RedfishMaintenancePolicy{Spec: expv1.RedfishMaintenancePolicySpec{
		ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}}}
	b, names, err := budgetOf(p, f, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"a1", "a2", "released"}) || b.inMaintenance != 1 {
		t.Errorf("selected %v (%+v), want a1, a2 and the released host in maintenance", names, b)
	}
}

// A maintenance whose Machine's replacement boots on a spare costs its budget one place (its host,
// held), not two: the spare booting for that MachineDeployment is paired with it. Any other host
// that is not Ready counts: a second boot for one maintenance, a boot for a Reuse maintenance
// (its replacement waits for the same host), a boot without a maintenance taking a Machine, a
// failed or overdue boot, and an unreachable one.
func TestASpareBootingForAMaintenancesReplacementIsCountedOnce(t *testing.T) {
	now := time.Now()
	host := func(name string, state infrav1.HostState, ready, reachable bool) infrav1.RedfishHost {
		h := infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Name: name}}
		h.Status.State = state
		set := func(typ string, ok bool) {
			s := metav1.ConditionFalse
			if ok {
				s = metav1.ConditionTrue
			}
			h.Status.Conditions = append(h.Status.Conditions, metav1.Condition{Type: typ, Status: s})
		}
		set(infrav1.ReadyCondition, ready)
		set(infrav1.BMCReachableCondition, reachable)
		return h
	}
	booting := func(name, md string, since time.Duration) infrav1.RedfishHost {
		h := host(name, infrav1.HostStateProvisioning, false, true)
		h.Status.Claim = &infrav1.HostClaim{Owner: &infrav1.ObjectRef{Kind: "MachineDeployment", Name: md}, Since: metav1.NewTime(now.Add(-since))}
		return h
	}
	// A maintenance that began draining 2 minutes ago.
	maint := func(name, hostName, md string, stage expv1.MaintenanceStage, mode expv1.MaintenanceMode) expv1.RedfishMaintenance {
		m := expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name}}
		m.Spec.HostName, m.Spec.Mode = hostName, mode
		m.Status.Stage, m.Status.MachineDeployment = stage, md
		m.Status.Stages = []expv1.StageTime{{Stage: expv1.StageDraining, Time: metav1.NewTime(now.Add(-2 * time.Minute))}}
		return m
	}
	failed := booting("boot-failed", "md-a", time.Minute)
	failed.Status.Conditions = append(failed.Status.Conditions, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionFalse, Reason: "ImageUnreachable"})
	busy := booting("bmc-busy", "md-a", time.Minute)
	busy.Status.Conditions = append(busy.Status.Conditions, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionFalse, Reason: infrav1.BMCBusyReason})
	unreachable := booting("booting-unreachable", "md-a", time.Minute)
	unreachable.Status.Conditions[1].Status = metav1.ConditionFalse
	held := booting("reboot-requested", "md-a", time.Minute)
	held.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "someone"}}
	deleting := booting("deleting", "md-a", time.Minute)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	controlPlane := booting("control-plane", "cp", time.Minute)
	controlPlane.Status.Claim.Owner.Kind = "KubeadmControlPlane"
	ready := booting("replacement-ready", "md-a", 90*time.Second)
	ready.Status.State = infrav1.HostStateProvisioned
	ready.Status.Conditions[0].Status = metav1.ConditionTrue
	bmcOnly := maint("m", "held", "md-a", expv1.StageInMaintenance, expv1.Replace)
	bmcOnly.Spec.Tasks = []expv1.MaintenanceTask{{Firmware: &expv1.FirmwareUpdate{Component: expv1.FirmwareBMC}}}
	cpMaint := maint("m", "held", "cp", expv1.StageDraining, expv1.Replace)
	servingHeld := host("held", infrav1.HostStateProvisioned, false, true)
	longAgo := maint("m", "held", "md-a", expv1.StageInMaintenance, expv1.Replace)
	longAgo.Status.Stages[0].Time = metav1.NewTime(now.Add(-40 * time.Minute))
	sameSecond := maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)
	sameSecond.Status.Stages[0].Time = metav1.NewTime(now.Add(-time.Minute))
	later := maint("m2", "held", "md-a", expv1.StageDraining, expv1.Replace)
	later.Status.Stages[0].Time = metav1.NewTime(now.Add(-time.Minute))
	sameNameCP := booting("cp-same-name", "md-a", 90*time.Second)
	sameNameCP.Status.Claim.Owner.Kind = "KubeadmControlPlane"
	sameNameCP.Status.State = infrav1.HostStateProvisioned
	sameNameCP.Status.Conditions[0].Status = metav1.ConditionTrue
	// A maintenance of one Machine that began draining ago before now.
	took := func(name, hostName, machineUID string, stage expv1.MaintenanceStage, ago time.Duration) expv1.RedfishMaintenance {
		m := maint(name, hostName, "md-a", stage, expv1.Replace)
		m.Status.MachineUID = machineUID
		m.Status.Stages[0].Time = metav1.NewTime(now.Add(-ago))
		return m
	}
	backRunning := host("back", infrav1.HostStateAvailable, true, true)
	oldReplacement := booting("old-replacement", "md-a", 50*time.Second) // the completed one's, claimed after the other's drain
	oldReplacement.Status.State = infrav1.HostStateProvisioned
	oldReplacement.Status.Conditions[0].Status = metav1.ConditionTrue
	ungoverned := booting("ungoverned-spare", "md-a", 110*time.Second)
	ungoverned.Labels = map[string]string{"governed": "no"}
	ungoverned.Status.State = infrav1.HostStateProvisioned
	ungoverned.Status.Conditions[0].Status = metav1.ConditionTrue
	elsewhere := host("elsewhere", infrav1.HostStateProvisioned, false, true)
	elsewhere.Labels = map[string]string{"governed": "no"}
	// A claim the host controller has yet to take: the host still Available, its conditions
	// already those of a boot (as when CAPI's patch helper wrote them before the state).
	justClaimed := booting("just-claimed", "md-a", 30*time.Second)
	justClaimed.Status.State = infrav1.HostStateAvailable
	readyTie := booting("z-ready", "md-a", time.Minute)
	readyTie.Status.State = infrav1.HostStateProvisioned
	readyTie.Status.Conditions[0].Status = metav1.ConditionTrue
	for _, c := range []struct {
		name     string
		hosts    []infrav1.RedfishHost
		ms       []expv1.RedfishMaintenance
		wantDown []string
	}{
		{"the replacement of a Machine a Replace maintenance took (Draining)",
			[]infrav1.RedfishHost{host("held", infrav1.HostStateProvisioned, false, true), booting("spare", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held"}},
		{"the same, InMaintenance",
			[]infrav1.RedfishHost{host("held", infrav1.HostStateProvisioned, false, true), booting("spare", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageInMaintenance, expv1.Replace)},
			[]string{"held"}},
		{"two boots for one maintenance: one counts",
			[]infrav1.RedfishHost{host("held", infrav1.HostStateProvisioned, false, true), booting("spare-1", "md-a", time.Minute), booting("spare-2", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "spare-2"}},
		{"a boot for another MachineDeployment",
			[]infrav1.RedfishHost{host("held", infrav1.HostStateProvisioned, false, true), booting("spare", "md-b", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "spare"}},
		{"a Reuse maintenance: its replacement waits for its host",
			[]infrav1.RedfishHost{host("held", infrav1.HostStateProvisioned, false, true), booting("spare", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageInMaintenance, expv1.Reuse)},
			[]string{"held", "spare"}},
		{"a maintenance that completed: its host serves again",
			[]infrav1.RedfishHost{host("back", infrav1.HostStateAvailable, true, true), booting("spare", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "back", "md-a", expv1.StageCompleted, expv1.Replace)},
			[]string{"spare"}},
		{"a maintenance on a host this policy does not govern",
			[]infrav1.RedfishHost{booting("spare", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "elsewhere", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"spare"}},
		{"no maintenance: a boot of a rollout or a scale-up",
			[]infrav1.RedfishHost{booting("spare", "md-a", time.Minute)}, nil,
			[]string{"spare"}},
		{"a failed boot, an unreachable one, an overdue one",
			[]infrav1.RedfishHost{host("held", infrav1.HostStateProvisioned, false, true), failed, unreachable, booting("overdue", "md-a", 31*time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "boot-failed", "booting-unreachable", "overdue"}},
		{"a boot claimed before the maintenance began draining",
			[]infrav1.RedfishHost{servingHeld, booting("spare", "md-a", 3*time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "spare"}},
		{"the replacement already Ready: a later boot is not it",
			[]infrav1.RedfishHost{servingHeld, ready, booting("scale-up", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageInMaintenance, expv1.Replace)},
			[]string{"held", "scale-up"}},
		{"two maintenances of one host: one Machine, one replacement",
			[]infrav1.RedfishHost{servingHeld, booting("spare-1", "md-a", time.Minute), booting("spare-2", "md-a", 30*time.Second)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace), maint("m2", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "spare-2"}},
		{"a boot held by a reboot request, a host being deleted",
			[]infrav1.RedfishHost{servingHeld, host("held2", infrav1.HostStateProvisioned, false, true), held, deleting},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace), maint("m2", "held2", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "held2", "reboot-requested", "deleting"}},
		{"a BMC firmware maintenance: its Machine keeps running",
			[]infrav1.RedfishHost{host("held", infrav1.HostStateProvisioned, true, true), booting("spare", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{bmcOnly},
			[]string{"held", "spare"}},
		{"a control plane's replacement",
			[]infrav1.RedfishHost{servingHeld, controlPlane},
			[]expv1.RedfishMaintenance{cpMaint},
			[]string{"held", "control-plane"}},
		{"a BMC busy for a moment is not a failed boot",
			[]infrav1.RedfishHost{servingHeld, busy},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held"}},
		{"a place is open for 30 minutes from the drain: a boot claimed later is not the replacement",
			[]infrav1.RedfishHost{servingHeld, booting("late", "md-a", 5*time.Minute)},
			[]expv1.RedfishMaintenance{longAgo},
			[]string{"held", "late"}},
		{"a replacement overdue: claimed after the drain, booting for over 30 minutes",
			[]infrav1.RedfishHost{servingHeld, booting("overdue", "md-a", 31*time.Minute)},
			[]expv1.RedfishMaintenance{longAgo},
			[]string{"held", "overdue"}},
		{"a claim in the drain's own second",
			[]infrav1.RedfishHost{servingHeld, booting("spare", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{sameSecond},
			[]string{"held"}},
		{"hosts listed newest claim first: the oldest takes the place",
			[]infrav1.RedfishHost{servingHeld, booting("newer", "md-a", 30*time.Second), booting("older", "md-a", 90*time.Second)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "newer"}},
		{"a Ready host of a control plane of the same name takes no place",
			[]infrav1.RedfishHost{servingHeld, sameNameCP, booting("spare", "md-a", time.Minute)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held"}},
		{"two maintenances of one host: the place opens at the first drain",
			[]infrav1.RedfishHost{servingHeld, booting("spare", "md-a", 90*time.Second)},
			[]expv1.RedfishMaintenance{later, maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held"}},
		{"an unreachable boot takes the place and counts",
			[]infrav1.RedfishHost{servingHeld, unreachable, booting("spare", "md-a", 30*time.Second)},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "booting-unreachable", "spare"}},
		{"claimed in the same second, a Ready host takes the place before a boot, whatever the order",
			[]infrav1.RedfishHost{servingHeld, booting("a-booting", "md-a", time.Minute), readyTie},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held", "a-booting"}},
		{"the replacement of a maintenance that completed takes its own place, not that of one under way",
			[]infrav1.RedfishHost{backRunning, oldReplacement, servingHeld, booting("new-replacement", "md-a", 30*time.Second)},
			[]expv1.RedfishMaintenance{took("old", "back", "uid-old", expv1.StageCompleted, 2*time.Minute), took("new", "held", "uid-new", expv1.StageDraining, time.Minute)},
			[]string{"held"}},
		{"a replacement on a host the policy does not govern takes its maintenance's place",
			[]infrav1.RedfishHost{backRunning, ungoverned, servingHeld, booting("new-replacement", "md-a", 30*time.Second)},
			[]expv1.RedfishMaintenance{took("old", "back", "uid-old", expv1.StageCompleted, 2*time.Minute), took("new", "held", "uid-new", expv1.StageDraining, time.Minute)},
			[]string{"held"}},
		{"the replacement of a maintenance on a host the policy does not govern takes that one's place",
			[]infrav1.RedfishHost{elsewhere, oldReplacement, servingHeld, booting("new-replacement", "md-a", 30*time.Second)},
			[]expv1.RedfishMaintenance{took("other", "elsewhere", "uid-other", expv1.StageInMaintenance, 2*time.Minute), took("new", "held", "uid-new", expv1.StageDraining, time.Minute)},
			[]string{"held"}},
		{"two maintenances of one host, one after the other: two Machines, two places",
			[]infrav1.RedfishHost{servingHeld, oldReplacement, booting("new-replacement", "md-a", 30*time.Second)},
			[]expv1.RedfishMaintenance{took("old", "held", "uid-old", expv1.StageCompleted, 2*time.Minute), took("new", "held", "uid-new", expv1.StageDraining, time.Minute)},
			[]string{"held"}},
		{"a replacement's host claimed, its state not moved to Provisioning yet",
			[]infrav1.RedfishHost{servingHeld, justClaimed},
			[]expv1.RedfishMaintenance{maint("m", "held", "md-a", expv1.StageDraining, expv1.Replace)},
			[]string{"held"}},
		{"serving, cleaning and unreachable hosts",
			[]infrav1.RedfishHost{host("serving", infrav1.HostStateProvisioned, true, true), host("cleaning", infrav1.HostStateCleaning, false, true), host("provisioned-unreachable", infrav1.HostStateProvisioned, false, false)},
			[]expv1.RedfishMaintenance{maint("m", "serving", "md-a", expv1.StageInMaintenance, expv1.Replace)},
			[]string{"serving", "cleaning", "provisioned-unreachable"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ten := intstr.FromInt32(10)
			p := &expv1.RedfishMaintenancePolicy{Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &ten,
				HostSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "governed", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"no"}}}}}}
			b, names, err := budgetOf(p, fleet{hosts: c.hosts, ms: c.ms}, "", now)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range c.hosts {
				if h.Labels["governed"] == "no" && slices.Contains(names, h.Name) {
					t.Errorf("the policy governs %s", h.Name)
				}
				if b.down[h.Name] {
					got = append(got, h.Name)
				}
			}
			if !slices.Equal(got, c.wantDown) || b.unavailable != len(c.wantDown) {
				t.Errorf("counted down %v (%d unavailable), want %v", got, b.unavailable, c.wantDown)
			}
		})
	}
}

// A replacement's boot that hangs past its grace counts in the policy's status when the grace
// ends: nothing else changes then to wake the policy, so its reconcile looks again at that moment.
func TestAPolicyCountsAHungReplacementBootWhenItsGraceEnds(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	now := start
	ten := intstr.FromInt32(10)
	held := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "held"}}
	held.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse}}
	spare := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "spare"}}
	spare.Status.State = infrav1.HostStateProvisioning
	spare.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse}, {Type: infrav1.BMCReachableCondition, Status: metav1.ConditionTrue}}
	spare.Status.Claim = &infrav1.HostClaim{Owner: &infrav1.ObjectRef{Kind: "MachineDeployment", Name: "md"}, Since: metav1.NewTime(start.Add(time.Minute))}
	m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}, Spec: expv1.RedfishMaintenanceSpec{HostName: "held", Mode: expv1.Replace}}
	m.Status.Stage, m.Status.MachineDeployment = expv1.StageInMaintenance, "md"
	m.Status.Stages = []expv1.StageTime{{Stage: expv1.StageDraining, Time: metav1.NewTime(start)}}
	p := &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &ten}}
	c := apiWorld(t, held, spare, m, p)
	r := &PolicyReconciler{Client: c, Now: func() time.Time { return now }}
	look := func() (int32, time.Duration) {
		t.Helper()
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		if err != nil {
			t.Fatal(err)
		}
		got := &expv1.RedfishMaintenancePolicy{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Unavailable, res.RequeueAfter
	}
	now = start.Add(2 * time.Minute)
	if unavailable, after := look(); unavailable != 1 || after != 29*time.Minute {
		t.Errorf("booting replacement: %d unavailable, looks again after %s; want 1 (the held host) and 29m (when the boot's grace ends)", unavailable, after)
	}
	now = start.Add(31 * time.Minute)
	if unavailable, after := look(); unavailable != 2 || after != 0 {
		t.Errorf("boot hung past its grace: %d unavailable, looks again after %s; want 2 and no look (nothing left to recount)", unavailable, after)
	}
}
