package maintenance

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// ParseWindow reads a window's schedule and time zone; the webhook refuses what it cannot read.
func ParseWindow(w expv1.MaintenanceWindow) (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if w.TimeZone != "" {
		var err error
		if loc, err = time.LoadLocation(w.TimeZone); err != nil {
			return nil, nil, fmt.Errorf("timeZone %q: %w", w.TimeZone, err)
		}
	}
	if strings.HasPrefix(w.Start, "CRON_TZ=") || strings.HasPrefix(w.Start, "TZ=") {
		return nil, nil, fmt.Errorf("start %q: give the time zone in timeZone, not in the schedule", w.Start)
	}
	if strings.HasPrefix(strings.TrimSpace(w.Start), "@every") {
		// A delay counted from whenever it is asked: no start of its own (never open, or always
		// with a duration of at least the delay).
		return nil, nil, fmt.Errorf("start %q is a delay, not a time a window starts: give a cron schedule such as \"0 * * * *\" (hourly)", w.Start)
	}
	sched, err := cron.ParseStandard(w.Start)
	if err != nil {
		return nil, nil, fmt.Errorf("start %q is not a cron schedule: %w", w.Start, err)
	}
	// robfig/cron gives up after five years: a schedule such as "0 0 30 2 *" never fires.
	if sched.Next(time.Now().In(loc)).IsZero() {
		return nil, nil, fmt.Errorf("start %q is not a cron schedule that ever fires", w.Start)
	}
	return sched, loc, nil
}

// windowState says whether now falls inside one of the windows (true without windows), and when
// the next one opens.
func windowState(windows []expv1.MaintenanceWindow, now time.Time) (open bool, next time.Time, err error) {
	if len(windows) == 0 {
		return true, time.Time{}, nil
	}
	for _, w := range windows {
		sched, loc, err := ParseWindow(w)
		if err != nil {
			return false, time.Time{}, err
		}
		// The first start after (now - duration): at or before now means a window is open.
		start := sched.Next(now.In(loc).Add(-w.Duration.Duration))
		if start.IsZero() {
			continue // never fires: never open
		}
		if !start.After(now) {
			return true, time.Time{}, nil
		}
		if next.IsZero() || start.Before(next) {
			next = start
		}
	}
	return false, next, nil
}

// budget is how many hosts a policy lets be unavailable and in maintenance.
type budget struct {
	hosts, unavailable, inMaintenance int
	maxUnavailable, maxParallel       int             // maxParallel < 0: no limit
	down                              map[string]bool // the hosts counted unavailable
	// recount is when a boot not counted now (a replacement's, see replacements) passes its
	// grace and counts; zero when none.
	recount time.Time
}

// scaled resolves an int-or-percent against total: percentages round down but give at least 1.
func scaled(v *intstr.IntOrString, total, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, false)
	if err != nil {
		return 0, err
	}
	if v.Type == intstr.String && n < 1 {
		n = 1
	}
	return n, nil
}

// holding lists, per host name, the maintenances that hold it (Holds stages), besides skip.
func holding(ms []expv1.RedfishMaintenance, skip string) map[string]bool {
	out := map[string]bool{}
	for i := range ms {
		if ms[i].Name != skip && ms[i].TakesHostOut() {
			out[ms[i].Spec.HostName] = true
		}
	}
	return out
}

// fleet is what budgets are counted over: a namespace's hosts and maintenances, and the labels of
// its Clusters (nil when no policy selects Clusters).
type fleet struct {
	hosts    []infrav1.RedfishHost
	ms       []expv1.RedfishMaintenance
	clusters map[string]labels.Set
}

// readOnly lists straight from the cache, without a copy of each object: what the gate lists is
// only read (each look of each waiting maintenance copied every host, maintenance and Machine in
// the namespace; at N = 1000 the maintenance phase used 792 CPU s). The API server's reader
// ignores it.
var readOnly = client.UnsafeDisableDeepCopy

// listFleet reads a namespace's fleet with reader; the Clusters only when a policy selects them.
// What it returns is shared with the cache: never modify it.
func listFleet(ctx context.Context, reader client.Reader, namespace string, policies []expv1.RedfishMaintenancePolicy) (fleet, error) {
	var f fleet
	hosts := &infrav1.RedfishHostList{}
	if err := reader.List(ctx, hosts, client.InNamespace(namespace), readOnly); err != nil {
		return f, err
	}
	ms := &expv1.RedfishMaintenanceList{}
	if err := reader.List(ctx, ms, client.InNamespace(namespace), readOnly); err != nil {
		return f, err
	}
	f.hosts, f.ms = hosts.Items, ms.Items
	if !slices.ContainsFunc(policies, func(p expv1.RedfishMaintenancePolicy) bool { return p.Spec.ClusterSelector != nil }) {
		return f, nil
	}
	clusters := &clusterv1.ClusterList{}
	if err := reader.List(ctx, clusters, client.InNamespace(namespace), readOnly); err != nil {
		return f, err
	}
	f.clusters = map[string]labels.Set{}
	for _, c := range clusters.Items {
		f.clusters[c.Name] = c.Labels
	}
	return f, nil
}

// clusterOf is the Cluster a host serves: its claim's, or the one a maintenance holding it took
// it out of.
func (f fleet) clusterOf(h *infrav1.RedfishHost) string {
	if c := h.Status.Claim; c != nil && c.ClusterName != "" {
		return c.ClusterName
	}
	for _, m := range f.ms {
		if m.Spec.HostName == h.Name && m.Status.Stage.Holds() && m.Status.Cluster != "" {
			return m.Status.Cluster
		}
	}
	return ""
}

// budgetOf counts what a policy governs: its hosts, those unavailable (down, or held by a
// maintenance past approval), and those in maintenance. now dates the boots of replacements (see
// replacementBoot).
func budgetOf(p *expv1.RedfishMaintenancePolicy, f fleet, skip string, now time.Time) (budget, []string, error) {
	sel, clusterSel := labels.Everything(), labels.Selector(nil)
	var err error
	if p.Spec.HostSelector != nil {
		if sel, err = metav1.LabelSelectorAsSelector(p.Spec.HostSelector); err != nil {
			return budget{}, nil, fmt.Errorf("hostSelector: %w", err)
		}
	}
	if p.Spec.ClusterSelector != nil {
		if clusterSel, err = metav1.LabelSelectorAsSelector(p.Spec.ClusterSelector); err != nil {
			return budget{}, nil, fmt.Errorf("clusterSelector: %w", err)
		}
	}
	held := holding(f.ms, skip)
	b := budget{down: map[string]bool{}}
	var names []string
	var governed []*infrav1.RedfishHost
	for i := range f.hosts {
		h := &f.hosts[i]
		if !sel.Matches(labels.Set(h.Labels)) {
			continue
		}
		if clusterSel != nil {
			c, ok := f.clusters[f.clusterOf(h)]
			if !ok || !clusterSel.Matches(c) {
				continue
			}
		}
		governed = append(governed, h)
		names = append(names, h.Name)
	}
	exempt := replacements(f.ms, skip, f.hosts, governed, now)
	for _, h := range governed {
		b.hosts++
		switch {
		case held[h.Name]:
			b.unavailable++
			b.inMaintenance++
			b.down[h.Name] = true
		case conditions.IsTrue(h, infrav1.ReadyCondition):
		case exempt[h.Name]:
			if at := h.Status.Claim.Since.Add(replacementBootGrace); b.recount.IsZero() || at.Before(b.recount) {
				b.recount = at
			}
		default:
			b.unavailable++
			b.down[h.Name] = true
		}
	}
	if b.maxUnavailable, err = scaled(p.Spec.MaxUnavailable, b.hosts, 1); err != nil {
		return b, names, fmt.Errorf("maxUnavailable: %w", err)
	}
	if b.maxParallel, err = scaled(p.Spec.MaxParallel, b.hosts, -1); err != nil {
		return b, names, fmt.Errorf("maxParallel: %w", err)
	}
	return b, names, nil
}

// replacements names the hosts of governed booting the replacement of a Machine a maintenance
// under way on a host of governed took: those cost the budget nothing more, the maintenance's held
// host being counted already. Each Machine a maintenance (but skip; mode Replace) took is one
// place its MachineDeployment's replacement may take, from when the maintenance began draining
// (the Machine is deleted after) for replacementBootGrace. The hosts claimed for that
// MachineDeployment in that time, governed or not, take those places, oldest claim first,
// whatever they are doing (a replacement already Ready uses its place up; in a tie, a host that is
// not booting goes first). Maintenances that have ended, and those of hosts this policy does not
// govern, keep their places for this pairing, so that their replacements, claimed after another
// maintenance began draining, do not take the other's place; only a boot (see replacementBoot) in
// the place of a maintenance still Draining or InMaintenance on a host of governed is exempt: at
// most one host per maintained host. A boot claimed before the drain or long after, beyond the
// places (a scale-up, a remediation), or in another place counts as down.
func replacements(ms []expv1.RedfishMaintenance, skip string, hosts []infrav1.RedfishHost, governed []*infrav1.RedfishHost, now time.Time) map[string]bool {
	type place struct {
		began  time.Time
		active bool // its maintenance is Draining or InMaintenance, on a host of governed
	}
	isGoverned := make(map[string]bool, len(governed))
	for _, h := range governed {
		isGoverned[h.Name] = true
	}
	places := map[string]map[string]place{} // MachineDeployment -> Machine taken -> its place
	for i := range ms {
		m := &ms[i]
		if m.Name == skip || m.Spec.Mode == expv1.Reuse || m.Status.MachineDeployment == "" || keepsMachine(m) {
			continue
		}
		i := slices.IndexFunc(m.Status.Stages, func(s expv1.StageTime) bool { return s.Stage == expv1.StageDraining })
		if i < 0 {
			continue
		}
		p := place{began: m.Status.Stages[i].Time.Time,
			active: (m.Status.Stage == expv1.StageDraining || m.Status.Stage == expv1.StageInMaintenance) && isGoverned[m.Spec.HostName]}
		byMachine := places[m.Status.MachineDeployment]
		if byMachine == nil {
			byMachine = map[string]place{}
			places[m.Status.MachineDeployment] = byMachine
		}
		taken := m.Status.MachineUID
		if taken == "" {
			taken = "host/" + m.Spec.HostName
		}
		// Several maintenances that took one Machine (of one host, at once): one place, open
		// from the first drain, for a replacement while any of them is under way.
		if q, ok := byMachine[taken]; ok {
			p.began, p.active = minTime(p.began, q.began), p.active || q.active
		}
		byMachine[taken] = p
	}
	exempt := map[string]bool{}
	if len(places) == 0 {
		return exempt
	}
	type candidate struct {
		h       *infrav1.RedfishHost
		booting bool
	}
	var claimed []candidate
	for i := range hosts {
		h := &hosts[i]
		c := h.Status.Claim
		if c == nil || c.Owner == nil || c.Owner.Kind != machineDeploymentKind || places[c.Owner.Name] == nil {
			continue // not claimed for a MachineDeployment with a place
		}
		claimed = append(claimed, candidate{h: h, booting: !conditions.IsTrue(h, infrav1.ReadyCondition) && replacementBoot(h, now)})
	}
	// Oldest claim first; in a tie (claims are dated to the second), a host not booting first, then
	// by name: the outcome does not depend on the order hosts are listed in.
	slices.SortFunc(claimed, func(a, b candidate) int {
		if c := a.h.Status.Claim.Since.Compare(b.h.Status.Claim.Since.Time); c != 0 {
			return c
		}
		if a.booting != b.booting {
			if a.booting {
				return 1
			}
			return -1
		}
		return strings.Compare(a.h.Name, b.h.Name)
	})
	for _, x := range claimed {
		c := x.h.Status.Claim
		// The place whose time ends first among those open at the claim (the others stay open
		// longer for later claims).
		taken, first := "", place{}
		for machine, p := range places[c.Owner.Name] {
			if c.Since.Time.Before(p.began) || !c.Since.Time.Before(p.began.Add(replacementBootGrace)) {
				continue
			}
			if taken == "" || p.began.Before(first.began) || (p.began.Equal(first.began) && machine < taken) {
				taken, first = machine, p
			}
		}
		if taken == "" {
			continue // claimed before every drain of its MachineDeployment, or long after
		}
		delete(places[c.Owner.Name], taken)
		exempt[x.h.Name] = x.booting && first.active && isGoverned[x.h.Name]
	}
	return exempt
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// machineDeploymentKind is the kind a claim names as its owner for a MachineDeployment's Machine.
const machineDeploymentKind = "MachineDeployment"

// replacementBootGrace is how long a spare's boot for a MachineDeployment's Machine may take before
// the spare counts as down like any host that is not Ready.
const replacementBootGrace = 30 * time.Minute

// replacementBoot says whether a host may be booting as a replacement: being provisioned for its
// claim (made within replacementBootGrace), its BMC reachable, its boot not failed (a BMC only
// busy for a moment is retried), nothing holding its power, not being deleted. replacements
// pairs it with a maintenance's place: counted too, a maintenance whose Machine's replacement
// lands on a spare cost its budget two places until the replacement's Node was up.
func replacementBoot(h *infrav1.RedfishHost, now time.Time) bool {
	c := h.Status.Claim
	failed := conditions.IsFalse(h, infrav1.BootPreparedCondition) && conditions.GetReason(h, infrav1.BootPreparedCondition) != infrav1.BMCBusyReason
	// A host just claimed is still Available until its controller takes the claim: its boot is
	// about to start.
	starting := h.Status.State == infrav1.HostStateAvailable && c != nil && !c.Release && !c.Provisioned
	return (h.Status.State == infrav1.HostStateProvisioning || starting) && c != nil && c.Owner != nil && c.Owner.Kind == machineDeploymentKind &&
		now.Sub(c.Since.Time) < replacementBootGrace && !failed &&
		conditions.IsTrue(h, infrav1.BMCReachableCondition) && len(h.Spec.RebootRequests) == 0 && h.DeletionTimestamp.IsZero()
}

// allows says whether one more host may go into maintenance. A host already counted unavailable
// (see budgetOf) changes nothing in maxUnavailable by being taken; one that another maintenance already
// holds (several maintenances on one host) changes nothing in either count.
func (b budget) allows(alreadyUnavailable, alreadyInMaintenance bool) (bool, string) {
	if alreadyInMaintenance {
		return true, ""
	}
	extra := 1
	if alreadyUnavailable {
		extra = 0
	}
	if b.unavailable+extra > b.maxUnavailable {
		return false, fmt.Sprintf("%d of %d hosts unavailable, maxUnavailable %d", b.unavailable, b.hosts, b.maxUnavailable)
	}
	if b.maxParallel >= 0 && b.inMaintenance+1 > b.maxParallel {
		return false, fmt.Sprintf("%d of %d hosts in maintenance, maxParallel %d", b.inMaintenance, b.hosts, b.maxParallel)
	}
	return true, ""
}

// rollingOut says whether the Machine's MachineDeployment is mid-rollout: its controller has not
// caught up with its spec yet, it reports RollingOut, or not every replica is up to date.
// The caller reads it from the cache first and confirms a "no" from the API server: a rollout
// that just began must not be missed.
func (r *Reconciler) rollingOut(ctx context.Context, reader client.Reader, machine *clusterv1.Machine) (string, bool, error) {
	name := machine.Labels[clusterv1.MachineDeploymentNameLabel]
	if name == "" {
		return "", false, nil
	}
	md := &clusterv1.MachineDeployment{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: machine.Namespace, Name: name}, md); err != nil {
		return name, false, client.IgnoreNotFound(err)
	}
	if md.Status.ObservedGeneration < md.Generation || conditions.IsTrue(md, clusterv1.MachineDeploymentRollingOutCondition) {
		return name, true, nil
	}
	// Right after a template change the MachineDeployment may still report no rollout before
	// its new MachineSet exists: a MachineSet for the current template is missing, or another
	// one still has replicas.
	sets := &clusterv1.MachineSetList{}
	if err := reader.List(ctx, sets, client.InNamespace(md.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: name}); err != nil {
		return name, false, err
	}
	current, others := false, false
	for _, ms := range sets.Items {
		t := ms.Spec.Template.Spec
		if t.InfrastructureRef.Name == md.Spec.Template.Spec.InfrastructureRef.Name && t.Version == md.Spec.Template.Spec.Version &&
			t.Bootstrap.ConfigRef.Name == md.Spec.Template.Spec.Bootstrap.ConfigRef.Name && equalStrings(t.Bootstrap.DataSecretName, md.Spec.Template.Spec.Bootstrap.DataSecretName) {
			current = true
		} else if ms.Spec.Replicas == nil || *ms.Spec.Replicas > 0 {
			others = true
		}
	}
	if !current || others {
		return name, true, nil
	}
	want := int32(0)
	if md.Spec.Replicas != nil {
		want = *md.Spec.Replicas
	}
	upToDate, replicas := int32(0), int32(0)
	if md.Status.UpToDateReplicas != nil {
		upToDate = *md.Status.UpToDateReplicas
	}
	if md.Status.Replicas != nil {
		replicas = *md.Status.Replicas
	}
	return name, upToDate < want || replicas > want, nil
}

// gateOpen checks every policy selecting the host: a window open, room in the budget, and no
// higher-ranked maintenance waiting for the same budget. The caller reads it from the cache first
// and confirms an open gate under its lock, from a reader that holds every maintenance started
// (see cacheHasStarts): the cache could miss one that just started.
func (r *Reconciler) gateOpen(ctx context.Context, reader client.Reader, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, machine *clusterv1.Machine) (bool, string, string, time.Duration, error) {
	policies := &expv1.RedfishMaintenancePolicyList{}
	if err := reader.List(ctx, policies, client.InNamespace(m.Namespace)); err != nil {
		return false, "", "", 0, err
	}
	f, err := listFleet(ctx, reader, m.Namespace, policies.Items)
	if err != nil {
		return false, "", "", 0, err
	}
	// Another maintenance already has this host out: taking it again costs no budget and waits
	// for no one.
	hostHeld := holding(f.ms, m.Name)[host.Name]
	now := r.Now()
	limit := 1 // the MachineDeployment's share of the budget: the strictest policy's maxUnavailable
	governed := false
	for i := range policies.Items {
		p := &policies.Items[i]
		b, names, err := budgetOf(p, f, m.Name, now)
		if err != nil {
			return false, InvalidPolicyReason, fmt.Sprintf("RedfishMaintenancePolicy %s: %v", p.Name, err), 10 * r.PollInterval, nil
		}
		if !slices.Contains(names, host.Name) {
			continue
		}
		if !governed || b.maxUnavailable < limit {
			limit, governed = b.maxUnavailable, true
		}
		open, next, err := windowState(p.Spec.Windows, now)
		if err != nil {
			return false, InvalidPolicyReason, fmt.Sprintf("RedfishMaintenancePolicy %s: %v", p.Name, err), 10 * r.PollInterval, nil
		}
		if !open {
			return false, WaitingForWindowReason, fmt.Sprintf("RedfishMaintenancePolicy %s: the next window opens at %s", p.Name, next.UTC().Format(time.RFC3339)),
				min(max(next.Sub(now), time.Second), 10*r.PollInterval), nil
		}
		if ok, why := b.allows(b.down[host.Name], hostHeld); !ok {
			return false, WaitingForBudgetReason, fmt.Sprintf("RedfishMaintenancePolicy %s: %s", p.Name, why), r.budgetRecheck(), nil
		}
		// The budget's room goes to the maintenances first in line: as many start at once as it
		// has places (the first may always try: its host may cost the budget nothing).
		if line := inLine(f.ms, names); !hostHeld && position(line, m.Name) >= b.room() {
			return false, WaitingForBudgetReason, fmt.Sprintf("RedfishMaintenancePolicy %s: %d maintenances ahead in line (first: %s, priority %d), room for %d",
				p.Name, position(line, m.Name), line[0].Name, line[0].Spec.Priority, b.room()), r.budgetRecheck(), nil
		}
	}
	if !governed {
		// No policy selects the host: one such host held at a time in the namespace, counting
		// every stage that holds one (a failed maintenance keeps its host out: a firmware the
		// BMCs reject takes one host out, not the namespace).
		for _, o := range f.ms {
			if o.Name != m.Name && o.Spec.HostName != host.Name && o.TakesHostOut() && !r.governed(policies.Items, f, o.Spec.HostName) {
				return false, WaitingForBudgetReason, fmt.Sprintf("No RedfishMaintenancePolicy selects host %s: one such host out of service at a time, and maintenance %s holds host %s (%s)", host.Name, o.Name, o.Spec.HostName, o.Status.Stage), r.budgetRecheck(), nil
			}
		}
	}
	if keepsMachine(m) {
		return true, "", "", 0, nil // its Machine keeps running: the MachineDeployment loses nothing
	}
	return r.machineDeploymentAllows(ctx, reader, m, machine, f.ms, limit)
}

// governed says whether a policy selects the host.
func (r *Reconciler) governed(policies []expv1.RedfishMaintenancePolicy, f fleet, host string) bool {
	for i := range policies {
		if _, names, err := budgetOf(&policies[i], f, "", r.Now()); err == nil && slices.Contains(names, host) {
			return true
		}
	}
	return false
}

// machineDeploymentAllows keeps the cluster whole: taking the Machine must not leave its
// MachineDeployment with more replicas unavailable than the budget allows (the strictest policy's
// maxUnavailable, 1 without a policy). Unavailable: replicas without a Running Machine with a Node,
// plus the Running Machines that other maintenances past the gate are about to delete.
func (r *Reconciler) machineDeploymentAllows(ctx context.Context, reader client.Reader, m *expv1.RedfishMaintenance, machine *clusterv1.Machine, ms []expv1.RedfishMaintenance, limit int) (bool, string, string, time.Duration, error) {
	if machine == nil || !machine.DeletionTimestamp.IsZero() || string(machine.UID) != m.Status.MachineUID {
		return true, "", "", 0, nil
	}
	// The group whose availability counts: the MachineDeployment, or the control plane.
	var group client.MatchingLabels
	name, replicas := "", 0
	if _, ok := machine.Labels[clusterv1.MachineControlPlaneLabel]; ok {
		group = client.MatchingLabels{clusterv1.ClusterNameLabel: machine.Spec.ClusterName, clusterv1.MachineControlPlaneLabel: ""}
		name, limit = "the control plane of "+machine.Spec.ClusterName, 1
	} else if md := m.Status.MachineDeployment; md != "" {
		obj := &clusterv1.MachineDeployment{}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: md}, obj); err != nil {
			return client.IgnoreNotFound(err) == nil, "", "", 0, client.IgnoreNotFound(err)
		}
		group, name, replicas = client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md}, "MachineDeployment "+md, int(ptr.Deref(obj.Spec.Replicas, 0))
		// The MachineDeployment's own rollout budget, if larger than 1, bounded by the policies'.
		if ru := obj.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable; ru != nil {
			if n, err := intstr.GetScaledValueFromIntOrPercent(ru, replicas, false); err == nil {
				limit = min(limit, max(n, 1))
			}
		} else {
			limit = 1
		}
	} else {
		return true, "", "", 0, nil
	}
	// Counted from the Machines themselves: the MachineDeployment's status lags behind a deletion.
	machines := &clusterv1.MachineList{}
	if err := reader.List(ctx, machines, client.InNamespace(m.Namespace), group, readOnly); err != nil {
		return false, "", "", 0, err
	}
	running, targetRunning := map[string]bool{}, false
	for _, o := range machines.Items {
		if countsRunning(&o) {
			running[string(o.UID)] = true
			targetRunning = targetRunning || o.UID == machine.UID
		}
	}
	if replicas == 0 {
		replicas = len(machines.Items) // the control plane: its Machines
	}
	// Replicas not running, plus the Machines other maintenances are about to take (past the
	// gate, their Machine not deleted yet: still Running, but already spent from the budget).
	unavailable := max(replicas-len(running), 0)
	for _, o := range ms {
		if o.Name != m.Name && o.Status.MachineDeployment == m.Status.MachineDeployment && o.Status.MachineDeployment != "" &&
			(o.Status.Stage == expv1.StageDraining || o.Status.Stage == expv1.StageInMaintenance) && running[o.Status.MachineUID] && !keepsMachine(&o) {
			unavailable++
		}
	}
	extra := 1
	if !targetRunning {
		extra = 0 // already counted as unavailable: taking it changes nothing
	}
	if unavailable+extra > limit {
		// Its own MachineDeployment refuses it: it steps out of the policies' line (another
		// cluster's maintenance behind it may start) until the MachineDeployment has room.
		return false, WaitingForMachineDeploymentReason, fmt.Sprintf("%s has %d of %d replicas unavailable (or being replaced); taking Machine %s would exceed maxUnavailable %d",
			name, unavailable, replicas, machine.Name, limit), r.budgetRecheck(), nil
	}
	return true, "", "", 0, nil
}

// budgetRecheck is how often a maintenance waiting for a budget looks again by itself: only a
// safety net, for what the watches do not report (a host relabelled into a policy, a
// MachineDeployment resized); what moves a budget wakes it at once (wake.go). At fleet scale every
// waiting maintenance's look costs a pass over the namespace's hosts, maintenances and Machines.
func (r *Reconciler) budgetRecheck() time.Duration { return 10 * r.PollInterval }

// room is how many more hosts the budget lets go into maintenance now; at least 1, for the first
// in line to try (a host that is already unavailable costs nothing).
func (b budget) room() int {
	n := b.maxUnavailable - b.unavailable
	if b.maxParallel >= 0 {
		n = min(n, b.maxParallel-b.inMaintenance)
	}
	return max(n, 1)
}

// position is where the maintenance named stands in line, len(line) when not in it.
func position(line []*expv1.RedfishMaintenance, name string) int {
	for i, m := range line {
		if m.Name == name {
			return i
		}
	}
	return len(line)
}

// inLine lists the approved maintenances of those hosts that wait for the budget, in the order they
// start: highest priority, then oldest, then by name.
func inLine(ms []expv1.RedfishMaintenance, hosts []string) []*expv1.RedfishMaintenance {
	of := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		of[h] = true
	}
	var waiting []*expv1.RedfishMaintenance
	for i := range ms {
		if waitsForBudget(&ms[i]) && of[ms[i].Spec.HostName] {
			waiting = append(waiting, &ms[i])
		}
	}
	sort.Slice(waiting, func(i, j int) bool {
		a, b := waiting[i], waiting[j]
		if a.Spec.Priority != b.Spec.Priority {
			return a.Spec.Priority > b.Spec.Priority
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return waiting
}

// waitsForBudget says whether the maintenance is approved and waits for room in a budget: one
// waiting for its window or a rollout does not hold the others up.
// A paused one (a maintenance set that reached its maxFailures pauses those it had not started)
// does not either.
func waitsForBudget(m *expv1.RedfishMaintenance) bool {
	reason := conditions.GetReason(m, infrav1.ReadyCondition)
	return m.Status.Stage == expv1.StageApproved && m.DeletionTimestamp.IsZero() && !annotations.HasPaused(m) && (reason == "" || reason == WaitingForBudgetReason)
}

func equalStrings(a, b *string) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}
