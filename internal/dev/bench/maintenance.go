package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
)

// maintainLabel marks the hosts the maintenance phase maintains; its policy selects them.
const maintainLabel = "bench.caprf.io/maintain"

// maintain is the maintenance rollout: M = min(100, N) worker hosts get an Enforced
// powerOffAndHold maintenance under a policy of maxUnavailable M/10 (the MachineDeployment's
// rollout maxUnavailable raised to match, as the cluster's owner would); CAPI drains and replaces
// each Machine on a spare host, and a technician (this benchmark) completes each maintenance
// TaskTime after its host is held off.
func (r *run) maintain(ctx context.Context) error {
	m := min(100, r.o.Hosts)
	maxU := max(1, m/10)
	var hosts []string
	tech := &technician{r: r, taskTime: r.o.TaskTime, seen: map[string]*maintenanceTimes{}, wake: make(chan struct{}, 1)}
	// The setup a platform team has in place before a rollout (the policy and the labels that
	// select its hosts, the MachineDeployment's maxUnavailable) is not timed: the phase starts
	// with the maintenances' creation.
	setupStart := time.Now()
	if err := r.maintenanceSetup(ctx, m, maxU, &hosts); err != nil {
		return fmt.Errorf("maintenance setup: %w", err)
	}
	r.printf("maintenance setup (labels, policy, maxUnavailable) took %.1fs, not timed", time.Since(setupStart).Seconds())
	start := func(ctx context.Context) error {
		if err := parallel(ctx, m, func(ctx context.Context, i int) error {
			return r.c.Create(ctx, &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fw-" + hosts[i]},
				Spec: expv1.RedfishMaintenanceSpec{HostName: hosts[i], Reason: "benchmark: power off and hold", Requestor: "bench",
					Policy: expv1.Enforced, Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}}})
		}); err != nil {
			return err
		}
		go tech.run(ctx)
		return nil
	}
	unwatch, err := tech.watch(ctx)
	if err != nil {
		return err
	}
	defer unwatch()
	techCtx, stopTech := context.WithCancel(ctx)
	defer stopTech()
	done := func(ctx context.Context) (bool, error) {
		list := &expv1.RedfishMaintenanceList{}
		if err := r.cache.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		completed := 0
		for _, mt := range list.Items {
			switch mt.Status.Stage {
			case expv1.StageCompleted:
				completed++
			case expv1.StageFailed, expv1.StageCancelled:
				return false, fmt.Errorf("maintenance %s ended %s", mt.Name, mt.Status.Stage)
			}
		}
		if completed < m {
			return false, nil
		}
		return r.rolledOut(r.template)(ctx)
	}
	p, err := r.measure(techCtx, "maintenance", m, start, done, 20*time.Minute+time.Duration(m)*10*time.Second)
	if err != nil {
		return err
	}
	tech.mu.Lock()
	p.Maintenance = &MaintenanceFigures{Hosts: m, MaxUnavailable: maxU, TaskSeconds: r.o.TaskTime.Seconds(), PeakInMaintenance: tech.peak}
	tech.stages(p.Maintenance, maxU, p.start, p.end)
	tech.mu.Unlock()
	p.Split = ptr.To(r.tl.split(p.start, p.end, r.o.PowerLatency+r.o.BootTime))
	waves := (m + maxU - 1) / maxU
	wave := r.o.PowerLatency + r.o.EraseDuration + r.o.TaskTime
	p.setFloor(time.Duration(waves)*wave, fmt.Sprintf("ideal wave time: %d waves of maxUnavailable %d, each (P+E+T): a host powers off and is erased on release, then its task takes T", waves, maxU))
	return nil
}

// maintenanceSetup picks the first m worker hosts (by name), raises the MachineDeployment's
// maxUnavailable to maxU, labels the hosts for the policy and creates the policy.
func (r *run) maintenanceSetup(ctx context.Context, m, maxU int, hosts *[]string) error {
	machines := &clusterv1.MachineList{}
	if err := r.cache.List(ctx, machines, client.InNamespace(namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: mdName}); err != nil {
		return err
	}
	for _, mc := range machines.Items {
		if h := claim.HostOf(mc.Spec.ProviderID, namespace); h != "" {
			*hosts = append(*hosts, h)
		}
	}
	slices.Sort(*hosts)
	if len(*hosts) < m {
		return fmt.Errorf("%d worker hosts, want %d", len(*hosts), m)
	}
	*hosts = (*hosts)[:m]
	md := &clusterv1.MachineDeployment{}
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: mdName}, md); err != nil {
		return err
	}
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(int32(maxU)))
	if err := r.c.Patch(ctx, md, patch); err != nil {
		return err
	}
	if err := parallel(ctx, m, func(ctx context.Context, i int) error {
		h := &infrav1.RedfishHost{}
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: (*hosts)[i]}, h); err != nil {
			return err
		}
		patch := client.MergeFrom(h.DeepCopy())
		if h.Labels == nil {
			h.Labels = map[string]string{}
		}
		h.Labels[maintainLabel] = "true"
		return r.c.Patch(ctx, h, patch)
	}); err != nil {
		return err
	}
	budget := intstr.FromInt32(int32(maxU))
	return r.c.Create(ctx, &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "bench"},
		Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &budget, HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{maintainLabel: "true"}}}})
}

// technician completes each maintenance TaskTime after it saw it InMaintenance with its host off.
type technician struct {
	r        *run
	taskTime time.Duration
	mu       sync.Mutex
	peak     int // most maintenances draining or in maintenance at once
	seen     map[string]*maintenanceTimes
	wake     chan struct{} // a maintenance's stage or a host's power changed (watch)
}

// maintenanceTimes are when the technician first saw a maintenance reach each stage.
type maintenanceTimes struct {
	draining, inMaintenance, heldOff, completeSent, completed time.Time
}

// stages splits each maintenance's life into the stretches the wave time is made of (the
// technician looks on every change of a maintenance's stage or a host's power, so each is known
// to within the cache's delay).
func (t *technician) stages(f *MaintenanceFigures, maxU int, start, end time.Time) {
	var drain, held, done, draining []time.Duration
	var starts, ends []time.Time
	n := 0
	for _, mt := range t.seen {
		// Each stretch from the maintenances whose both ends were seen (a stage passed between
		// two looks is not).
		if !mt.draining.IsZero() && !mt.inMaintenance.IsZero() {
			n++
			drain = append(drain, mt.inMaintenance.Sub(mt.draining))
		}
		if !mt.inMaintenance.IsZero() && !mt.heldOff.IsZero() {
			held = append(held, mt.heldOff.Sub(mt.inMaintenance))
		}
		if !mt.completeSent.IsZero() && !mt.completed.IsZero() {
			done = append(done, mt.completed.Sub(mt.completeSent))
		}
		if s := earliest(mt.draining, mt.inMaintenance); !s.IsZero() {
			starts = append(starts, s)
		}
		if !mt.completed.IsZero() {
			ends = append(ends, mt.completed)
		}
	}
	// The (maxU+i)-th maintenance to start took the place the i-th to complete freed: the time
	// between the two is the gate's reaction (the host back Ready, the next woken and confirmed
	// from the API server) and any wait for the MachineDeployment's share.
	slices.SortFunc(starts, time.Time.Compare)
	slices.SortFunc(ends, time.Time.Compare)
	for i := 0; i+maxU < len(starts) && i < len(ends); i++ {
		draining = append(draining, starts[i+maxU].Sub(ends[i]))
	}
	toDeletion, toInMaintenance := t.r.tl.maintenanceRounds()
	f.Stages = &MaintenanceStages{Maintenances: n, Drain: summarize(drain), HeldOff: summarize(held), Complete: summarize(done), NextStart: summarize(draining),
		ToMachineDeletion: summarize(toDeletion), ReleasedToInMaintenance: summarize(toInMaintenance)}
	if len(starts) > 0 && len(ends) > 0 {
		f.Stages.FirstStartSeconds = ptr.To(starts[0].Sub(start).Seconds())
		// (The phase's end may be seen a look before the technician sees the last completion.)
		f.Stages.TailSeconds = ptr.To(max(0, end.Sub(ends[len(ends)-1]).Seconds()))
	}
}

// earliest is the earlier of two times seen (zero: not seen).
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// watch wakes the technician when a maintenance changes stage or completion, or a host its power
// state, as a technician at the rack would notice a server go dark: the task starts when the host
// is off, not at the next look. The returned function removes the handlers.
func (t *technician) watch(ctx context.Context) (func(), error) {
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	poke := func() {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	moved := map[client.Object]func(before, after any) bool{
		&expv1.RedfishMaintenance{}: func(before, after any) bool {
			b, ok1 := before.(*expv1.RedfishMaintenance)
			a, ok2 := after.(*expv1.RedfishMaintenance)
			return !ok1 || !ok2 || b.Status.Stage != a.Status.Stage || b.Spec.Complete != a.Spec.Complete
		},
		&infrav1.RedfishHost{}: func(before, after any) bool {
			b, ok1 := before.(*infrav1.RedfishHost)
			a, ok2 := after.(*infrav1.RedfishHost)
			return !ok1 || !ok2 || b.Status.PowerState != a.Status.PowerState
		},
	}
	for obj, changed := range moved {
		inf, err := t.r.cache.GetInformer(ctx, obj)
		if err != nil {
			stop()
			return nil, err
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { poke() },
			UpdateFunc: func(before, after any) {
				if changed(before, after) {
					poke()
				}
			},
		})
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, func() { _ = inf.RemoveEventHandler(reg) })
	}
	return stop, nil
}

// run looks at the maintenances whenever one changed stage or a host its power (at least every
// 100 ms), and when the next task is due.
func (t *technician) run(ctx context.Context) {
	next := 100 * time.Millisecond
	for {
		timer := time.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-t.wake:
		case <-timer.C:
		}
		timer.Stop()
		next = t.look(ctx)
	}
}

// look records the stages seen, completes each task that is due, and says when to look again at
// the latest (the next task due, or 100 ms).
func (t *technician) look(ctx context.Context) time.Duration {
	next := 100 * time.Millisecond
	list := &expv1.RedfishMaintenanceList{}
	if err := t.r.cache.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return next
	}
	out := 0
	now := time.Now()
	t.mu.Lock()
	for i := range list.Items {
		mt := &list.Items[i]
		seen := t.seen[mt.Name]
		if seen == nil {
			seen = &maintenanceTimes{}
			t.seen[mt.Name] = seen
		}
		switch mt.Status.Stage {
		case expv1.StageCompleted:
			setOnce(&seen.completed, now)
		case expv1.StageInMaintenance:
			setOnce(&seen.inMaintenance, now)
		case expv1.StageDraining:
			setOnce(&seen.draining, now)
		}
	}
	t.mu.Unlock()
	for i := range list.Items {
		mt := &list.Items[i]
		if mt.Status.Stage == expv1.StageDraining || mt.Status.Stage == expv1.StageInMaintenance {
			out++
		}
		if mt.Status.Stage != expv1.StageInMaintenance || mt.Spec.Complete {
			continue
		}
		h := &infrav1.RedfishHost{}
		if t.r.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: mt.Spec.HostName}, h) != nil || h.Status.PowerState != "Off" {
			continue
		}
		t.mu.Lock()
		setOnce(&t.seen[mt.Name].heldOff, time.Now())
		since := t.seen[mt.Name].heldOff
		t.mu.Unlock()
		if left := t.taskTime - time.Since(since); left > 0 {
			next = min(next, left)
			continue
		}
		patch := client.MergeFrom(mt.DeepCopy())
		mt.Spec.Complete = true
		if t.r.c.Patch(ctx, mt, patch) == nil { // an error: the next look tries again
			t.mu.Lock()
			setOnce(&t.seen[mt.Name].completeSent, time.Now())
			t.mu.Unlock()
		}
	}
	t.mu.Lock()
	t.peak = max(t.peak, out)
	t.mu.Unlock()
	return next
}
