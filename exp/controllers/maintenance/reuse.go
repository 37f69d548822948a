package maintenance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// ReuseHookPrefix starts the CAPI pre-terminate hook a maintenance in mode Reuse puts on the
// Machine it deletes, one per maintenance ("…/caprf-maintenance-<name>"): CAPI drains the Node,
// then waits with the RedfishMachine (and so the host's claim) in place until it is lifted.
const ReuseHookPrefix = clusterv1.PreTerminateDeleteHookAnnotationPrefix + "/caprf-maintenance-"

// ReuseHook is the hook of maintenance m; its value names the maintenance's UID. The name part of
// an annotation key holds at most 63 characters: a longer maintenance name is cut and a hash of
// it appended, so the key stays unique.
func ReuseHook(m *expv1.RedfishMaintenance) string {
	const max = 63
	name := strings.TrimPrefix(ReuseHookPrefix, clusterv1.PreTerminateDeleteHookAnnotationPrefix+"/") + m.Name
	if len(name) > max {
		sum := sha256.Sum256([]byte(m.Name))
		name = strings.TrimRight(name[:max-9], "-.") + "-" + hex.EncodeToString(sum[:4])
	}
	return clusterv1.PreTerminateDeleteHookAnnotationPrefix + "/" + name
}

// holdForReuse puts the hook on the Machine before this maintenance deletes it, and makes the
// host's claim release the host uncleaned and reserved for its owner. A Machine CAPI is already
// deleting gets no hook (CAPI may be past it, and would then never look again), but its host
// still comes back uncleaned and reserved. Both steps are idempotent: a restart repeats nothing.
func (r *Reconciler) holdForReuse(ctx context.Context, m *expv1.RedfishMaintenance, host *infrav1.RedfishHost, machine *clusterv1.Machine) error {
	if machine.Annotations[ReuseHook(m)] != string(m.UID) && machine.DeletionTimestamp.IsZero() {
		before := machine.DeepCopy()
		if machine.Annotations == nil {
			machine.Annotations = map[string]string{}
		}
		machine.Annotations[ReuseHook(m)] = string(m.UID)
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

// waitingForHook says whether CAPI has drained the Machine and now waits for this maintenance's hook.
func waitingForHook(machine *clusterv1.Machine, m *expv1.RedfishMaintenance) bool {
	if machine == nil {
		return false
	}
	_, hooked := machine.Annotations[ReuseHook(m)]
	return string(machine.UID) == m.Status.MachineUID && hooked &&
		machine.Status.Deletion != nil && !machine.Status.Deletion.WaitForPreTerminateHookStartTime.IsZero()
}

// liftReuseHook removes this maintenance's hook from the Machine it recorded, found by name and
// UID (not through the host, whose claim may be gone), if the hook is there.
func (r *Reconciler) liftReuseHook(ctx context.Context, m *expv1.RedfishMaintenance) error {
	if m.Spec.Mode != expv1.Reuse || m.Status.Machine == "" {
		return nil
	}
	machine := &clusterv1.Machine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Status.Machine}, machine); err != nil {
		return client.IgnoreNotFound(err)
	}
	if _, ok := machine.Annotations[ReuseHook(m)]; !ok || string(machine.UID) != m.Status.MachineUID {
		return nil
	}
	before := machine.DeepCopy()
	delete(machine.Annotations, ReuseHook(m))
	return client.IgnoreNotFound(r.Client.Patch(ctx, machine, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}
