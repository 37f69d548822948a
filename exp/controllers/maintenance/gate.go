package maintenance

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/cluster-api/util/conditions"

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
	sched, err := cron.ParseStandard(w.Start)
	if err != nil {
		return nil, nil, fmt.Errorf("start %q is not a cron schedule: %w", w.Start, err)
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
	maxUnavailable, maxParallel       int // maxParallel < 0: no limit
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
	for _, m := range ms {
		if m.Name != skip && m.Status.Stage.Holds() && m.Status.Stage != expv1.StageApproved {
			out[m.Spec.HostName] = true
		}
	}
	return out
}

// budgetOf counts what a policy governs: its hosts, those unavailable for any reason (not Ready)
// or held by a maintenance past approval, and those in maintenance.
func budgetOf(p *expv1.RedfishMaintenancePolicy, hosts []infrav1.RedfishHost, ms []expv1.RedfishMaintenance, skip string) (budget, []string, error) {
	sel := labels.Everything()
	if p.Spec.HostSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(p.Spec.HostSelector); err != nil {
			return budget{}, nil, fmt.Errorf("hostSelector: %w", err)
		}
	}
	held := holding(ms, skip)
	var b budget
	var names []string
	for i := range hosts {
		h := &hosts[i]
		if !sel.Matches(labels.Set(h.Labels)) {
			continue
		}
		b.hosts++
		names = append(names, h.Name)
		switch {
		case held[h.Name]:
			b.unavailable++
			b.inMaintenance++
		case !conditions.IsTrue(h, infrav1.ReadyCondition):
			b.unavailable++
		}
	}
	var err error
	if b.maxUnavailable, err = scaled(p.Spec.MaxUnavailable, b.hosts, 1); err != nil {
		return b, names, fmt.Errorf("maxUnavailable: %w", err)
	}
	if b.maxParallel, err = scaled(p.Spec.MaxParallel, b.hosts, -1); err != nil {
		return b, names, fmt.Errorf("maxParallel: %w", err)
	}
	return b, names, nil
}

// allows says whether one more host may go into maintenance: the host counts as unavailable
// already when it is not Ready (taking it changes nothing).
func (b budget) allows(hostAlreadyUnavailable bool) (bool, string) {
	extra := 1
	if hostAlreadyUnavailable {
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
