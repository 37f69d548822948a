package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	tech := &technician{r: r, taskTime: r.o.TaskTime, since: map[string]time.Time{}}
	start := func(ctx context.Context) error {
		machines := &clusterv1.MachineList{}
		if err := r.cache.List(ctx, machines, client.InNamespace(namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: mdName}); err != nil {
			return err
		}
		for _, mc := range machines.Items {
			if h := claim.HostOf(mc.Spec.ProviderID, namespace); h != "" {
				hosts = append(hosts, h)
			}
		}
		slices.Sort(hosts)
		if len(hosts) < m {
			return fmt.Errorf("%d worker hosts, want %d", len(hosts), m)
		}
		hosts = hosts[:m]
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
			if err := r.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: hosts[i]}, h); err != nil {
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
		if err := r.c.Create(ctx, &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "bench"},
			Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &budget, HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{maintainLabel: "true"}}}}); err != nil {
			return err
		}
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
		return r.rolledOut("workers-v2")(ctx)
	}
	p, err := r.measure(techCtx, "maintenance", m, start, done, 20*time.Minute+time.Duration(m)*10*time.Second)
	if err != nil {
		return err
	}
	tech.mu.Lock()
	p.Maintenance = &MaintenanceFigures{Hosts: m, MaxUnavailable: maxU, TaskSeconds: r.o.TaskTime.Seconds(), PeakInMaintenance: tech.peak}
	tech.mu.Unlock()
	p.Split = ptr.To(r.tl.split(p.start, p.end, r.o.PowerLatency+r.o.BootTime))
	waves := (m + maxU - 1) / maxU
	wave := r.o.PowerLatency + r.o.EraseDuration + r.o.TaskTime
	p.setFloor(time.Duration(waves)*wave, fmt.Sprintf("ideal wave time: %d waves of maxUnavailable %d, each (P+E+T): a host powers off and is erased on release, then its task takes T", waves, maxU))
	return nil
}

// technician completes each maintenance TaskTime after it reached InMaintenance with its host off.
type technician struct {
	r        *run
	taskTime time.Duration
	mu       sync.Mutex
	since    map[string]time.Time // maintenance → when it was first seen held off
	peak     int                  // most maintenances draining or in maintenance at once
}

func (t *technician) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		list := &expv1.RedfishMaintenanceList{}
		if err := t.r.cache.List(ctx, list, client.InNamespace(namespace)); err != nil {
			continue
		}
		out := 0
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
			since, ok := t.since[mt.Name]
			if !ok {
				since = time.Now()
				t.since[mt.Name] = since
			}
			t.mu.Unlock()
			if time.Since(since) < t.taskTime {
				continue
			}
			patch := client.MergeFrom(mt.DeepCopy())
			mt.Spec.Complete = true
			_ = t.r.c.Patch(ctx, mt, patch) // a conflict: the next look tries again
		}
		t.mu.Lock()
		t.peak = max(t.peak, out)
		t.mu.Unlock()
	}
}
