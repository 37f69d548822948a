package maintenance

import (
	"context"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// ReuseHook is the CAPI pre-terminate hook a maintenance in mode Reuse puts on the Machine it
// deletes: CAPI drains the Node, then waits with the RedfishMachine (and so the host's claim) in
// place until the maintenance lifts it. Its value names the maintenance.
const ReuseHook = clusterv1.PreTerminateDeleteHookAnnotationPrefix + "/caprf-maintenance"

// holdForReuse puts the hook on the Machine and makes the host's claim release it uncleaned and
// reserved for its owner. Both are idempotent: a restart repeats nothing.
func (r *Reconciler) holdForReuse(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, machine *clusterv1.Machine) error {
	if machine.Annotations[ReuseHook] != m.Name && (machine.Status.Deletion == nil || machine.Status.Deletion.WaitForPreTerminateHookStartTime.IsZero()) {
		before := machine.DeepCopy()
		if machine.Annotations == nil {
			machine.Annotations = map[string]string{}
		}
		machine.Annotations[ReuseHook] = m.Name
		if err := r.Client.Patch(ctx, machine, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	c := host.Status.Claim
	if c == nil || (c.NodeReuse && c.AutomatedCleaningMode == infrav1.CleaningModeDisabled) {
		return nil
	}
	before := host.DeepCopy()
	c.NodeReuse, c.AutomatedCleaningMode = true, infrav1.CleaningModeDisabled
	return r.Client.Status().Patch(ctx, host, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// waitingForHook says whether CAPI has drained the Machine and now waits for the hook.
func waitingForHook(machine *clusterv1.Machine, m *expv1.RedfishMaintenance) bool {
	return machine != nil && string(machine.UID) == m.Status.MachineUID && machine.Annotations[ReuseHook] == m.Name &&
		machine.Status.Deletion != nil && !machine.Status.Deletion.WaitForPreTerminateHookStartTime.IsZero()
}

// liftReuseHook removes this maintenance's hook from the Machine on the host, if it carries it.
func (r *Reconciler) liftReuseHook(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost) error {
	if m.Spec.Mode != expv1.Reuse || host == nil {
		return nil
	}
	_, machine, err := r.consumer(ctx, host)
	if err != nil || machine == nil || machine.Annotations[ReuseHook] != m.Name {
		return err
	}
	before := machine.DeepCopy()
	delete(machine.Annotations, ReuseHook)
	return client.IgnoreNotFound(r.Client.Patch(ctx, machine, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}
