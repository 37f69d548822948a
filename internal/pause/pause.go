// Package pause writes the Paused condition CAPI's contract asks of every provider object, without
// a write and a round of its own for a new object.
package pause

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Ensure is CAPI's paused.EnsurePausedCondition, except for an object that has no Paused
// condition yet and is not paused (a new object): EnsurePausedCondition would write its NotPaused
// condition alone and ask for another round, which a fleet of new hosts or Machines pays with one
// more write, one more read and one more wait for the cache each. Ensure writes nothing then and
// returns the condition (notPaused), for the caller to set once it has made the round's patch
// helper, so that the round's own write carries it.
func Ensure(ctx context.Context, c client.Client, cluster *clusterv1.Cluster, obj paused.ConditionSetter) (isPaused, requeue bool, notPaused *metav1.Condition, err error) {
	if conditions.Get(obj, clusterv1.PausedCondition) == nil &&
		(cluster == nil || !ptr.Deref(cluster.Spec.Paused, false)) && !annotations.HasPaused(obj) {
		return false, false, &metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse,
			Reason: clusterv1.NotPausedReason, ObservedGeneration: obj.GetGeneration()}, nil
	}
	isPaused, requeue, err = paused.EnsurePausedCondition(ctx, c, cluster, obj)
	return isPaused, requeue, nil, err
}
