package maintenance

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// A maintenance waiting for the budget is woken when the budget may have moved: another
// maintenance leaves a stage that holds a host, joins or leaves the line, changes priority or
// goes; a host goes down or comes back, or starts or ends a boot that may be a maintenance's
// replacement (policies count hosts that are down, see budgetOf and replacements); a
// Machine starts or stops running, or a MachineDeployment is resized or its rollout
// maxUnavailable changes (the MachineDeployment's share). Only the maintenances first in line in
// each policy, as many as its budget has room for, are woken (the others would wait for them
// anyway); each that passes the gate changes stage, which wakes the next, so a freed wave fills
// at once. Its own look (budgetRecheck, every 10 poll intervals) is only a safety net, for what
// no watch reports (a host relabelled into a policy, a new host in a percentage).

// stageChanged passes maintenances that left a stage that holds a host (they spent or freed a
// place), that joined or left the line or changed priority (the order moved), that are being
// deleted, or that went.
var stageChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*expv1.RedfishMaintenance)
		after, ok2 := e.ObjectNew.(*expv1.RedfishMaintenance)
		return !ok1 || !ok2 || (before.Status.Stage != after.Status.Stage && before.Status.Stage.Holds()) ||
			waitsForBudget(before) != waitsForBudget(after) || before.Spec.Priority != after.Spec.Priority ||
			before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// downChanged passes hosts that went down or came back, or started or stopped booting as a spare
// for a replacement does (see budgetOf), and hosts that went.
var downChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*infrav1.RedfishHost)
		after, ok2 := e.ObjectNew.(*infrav1.RedfishHost)
		return !ok1 || !ok2 || standing(before) != standing(after)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// standing is what a budget counts a host by: Ready, or booting as a replacement may (its claim's
// age read by the wall clock: a boot passing replacementBootGrace wakes nothing, it only makes
// budgets stricter).
func standing(h *infrav1.RedfishHost) [2]bool {
	return [2]bool{conditions.IsTrue(h, infrav1.ReadyCondition), replacementBoot(h, time.Now())}
}

// runningChanged passes Machines that started or stopped counting as available to the gate
// (Running with a Node, not being deleted), and Machines that went.
var runningChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*clusterv1.Machine)
		after, ok2 := e.ObjectNew.(*clusterv1.Machine)
		return !ok1 || !ok2 || countsRunning(before) != countsRunning(after)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// shareChanged passes MachineDeployments whose replicas or rollout maxUnavailable changed (the
// MachineDeployment's share of a budget).
var shareChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*clusterv1.MachineDeployment)
		after, ok2 := e.ObjectNew.(*clusterv1.MachineDeployment)
		return !ok1 || !ok2 || !ptr.Equal(before.Spec.Replicas, after.Spec.Replicas) ||
			!equality.Semantic.DeepEqual(before.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable, after.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func countsRunning(m *clusterv1.Machine) bool {
	return m.DeletionTimestamp.IsZero() && m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Status.NodeRef.IsDefined()
}

// wakeNextInLine maps any object to the maintenances of its namespace that go next.
func (r *Reconciler) wakeNextInLine() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.nextInLine(ctx, o.GetNamespace())
	})
}

// nextInLine lists, from the cache, the maintenances each policy starts next (as many as its budget
// has room for), and the first of those no policy governs; nothing when none waits for the budget.
func (r *Reconciler) nextInLine(ctx context.Context, namespace string) []reconcile.Request {
	ms := &expv1.RedfishMaintenanceList{}
	// Read only, on every event that may move a budget: the cache's own objects, not copies.
	if err := r.Client.List(ctx, ms, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range ms.Items {
		// Refused by its MachineDeployment: looks again at what moves one (cheap, and out of line).
		if m := &ms.Items[i]; m.Status.Stage == expv1.StageApproved && conditions.GetReason(m, infrav1.ReadyCondition) == WaitingForMachineDeploymentReason {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}})
		}
	}
	if !slices.ContainsFunc(ms.Items, func(m expv1.RedfishMaintenance) bool { return waitsForBudget(&m) }) {
		return out
	}
	policies := &expv1.RedfishMaintenancePolicyList{}
	if err := r.Client.List(ctx, policies, client.InNamespace(namespace)); err != nil {
		return nil
	}
	f, err := listFleet(ctx, r.Client, namespace, policies.Items)
	if err != nil {
		return nil
	}
	add := func(m *expv1.RedfishMaintenance) {
		if req := (reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}}); !slices.Contains(out, req) {
			out = append(out, req)
		}
	}
	governed := map[string]bool{}
	for i := range policies.Items {
		b, names, err := budgetOf(&policies.Items[i], f, "", r.Now())
		if err != nil {
			continue
		}
		for _, n := range names {
			governed[n] = true
		}
		line := inLine(f.ms, names)
		for _, m := range line[:min(len(line), b.room())] {
			add(m)
		}
	}
	var free []string
	for _, m := range f.ms {
		if !governed[m.Spec.HostName] {
			free = append(free, m.Spec.HostName)
		}
	}
	if line := inLine(f.ms, free); len(line) > 0 {
		add(line[0])
	}
	return out
}
