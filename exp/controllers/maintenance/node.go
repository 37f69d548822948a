package maintenance

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// Node conditions named as KEP-5683 (Node Lifecycle Conditions) names them; Kubernetes 1.36
// libraries do not define them yet.
const (
	NodeMaintenancePlanned    corev1.NodeConditionType = "MaintenancePlanned"
	NodeMaintenanceInProgress corev1.NodeConditionType = "MaintenanceInProgress"
)

// announceOnNode sets MaintenancePlanned and MaintenanceInProgress on the Machine's Node in the
// workload cluster (through CAPI's ClusterCache), so workloads and people on the cluster see
// what is coming. Best effort: a cluster that cannot be reached does not hold the maintenance up.
func (r *Reconciler) announceOnNode(ctx context.Context, m *expv1.RedfishMaintenance, machine *clusterv1.Machine, planned, inProgress bool) {
	if r.ClusterCache == nil || machine == nil || !machine.Status.NodeRef.IsDefined() {
		return
	}
	remote, err := r.ClusterCache.GetClient(ctx, client.ObjectKey{Namespace: machine.Namespace, Name: machine.Spec.ClusterName})
	if err != nil {
		return
	}
	node := &corev1.Node{}
	if err := remote.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, node); err != nil {
		return
	}
	before := node.DeepCopy()
	message := "RedfishMaintenance " + m.Namespace + "/" + m.Name + ": " + m.Spec.Reason
	changed := false
	for t, want := range map[corev1.NodeConditionType]bool{NodeMaintenancePlanned: planned, NodeMaintenanceInProgress: inProgress} {
		status, reason := corev1.ConditionFalse, "NoMaintenance"
		if want {
			status, reason = corev1.ConditionTrue, "RedfishMaintenance"
		}
		i := -1
		for j := range node.Status.Conditions {
			if node.Status.Conditions[j].Type == t {
				i = j
			}
		}
		switch {
		case i < 0 && !want:
			continue // nothing to clear
		case i < 0:
			node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: t})
			i = len(node.Status.Conditions) - 1
		case node.Status.Conditions[i].Status == status && (!want || node.Status.Conditions[i].Message == message):
			continue
		}
		c := &node.Status.Conditions[i]
		c.Status, c.Reason, c.Message = status, reason, message
		if !want {
			c.Message = ""
		}
		c.LastTransitionTime, c.LastHeartbeatTime = metav1.Now(), metav1.Now()
		changed = true
	}
	if changed {
		if err := remote.Status().Patch(ctx, node, client.StrategicMergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			ctrlLog(ctx).V(2).Info("could not set the maintenance conditions on the Node", "node", node.Name, "error", err.Error())
		}
	}
}
