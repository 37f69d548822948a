package pause

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// Only a new object that is not paused is spared its own write; a paused one (its annotation or
// its Cluster) is recorded paused at once and does nothing, as CAPI's EnsurePausedCondition does.
func TestOnlyANewObjectThatIsNotPausedLeavesItsConditionToTheRoundsWrite(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pausedCluster := &clusterv1.Cluster{Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}
	for _, tc := range []struct {
		name       string
		annotated  bool
		cluster    *clusterv1.Cluster
		recorded   bool // the object has its Paused condition already
		wantPaused bool
		wantLater  bool // the condition is returned for the round's write
		wantStored metav1.ConditionStatus
	}{
		{name: "new, not paused", cluster: &clusterv1.Cluster{}, wantLater: true},
		{name: "new, no cluster", wantLater: true},
		{name: "new, annotated", annotated: true, wantPaused: true, wantStored: metav1.ConditionTrue},
		{name: "new, its cluster paused", cluster: pausedCluster, wantPaused: true, wantStored: metav1.ConditionTrue},
		{name: "recorded, not paused", recorded: true, wantStored: metav1.ConditionFalse},
		{name: "recorded, its cluster paused", recorded: true, cluster: pausedCluster, wantPaused: true, wantStored: metav1.ConditionTrue},
	} {
		h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1"}}
		if tc.annotated {
			h.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
		}
		if tc.recorded {
			conditions.Set(h, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h).WithStatusSubresource(h).Build()
		isPaused, requeue, later, err := Ensure(t.Context(), c, tc.cluster, h)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if isPaused != tc.wantPaused || (later != nil) != tc.wantLater {
			t.Errorf("%s: paused %v, condition left to the round %v; want %v, %v", tc.name, isPaused, later, tc.wantPaused, tc.wantLater)
		}
		// A condition written now (every case here that turns paused) asks for a round; nothing
		// else does.
		if requeue != tc.wantPaused {
			t.Errorf("%s: requeue %v, want %v", tc.name, requeue, tc.wantPaused)
		}
		if later != nil && (later.Status != metav1.ConditionFalse || later.Reason != clusterv1.NotPausedReason) {
			t.Errorf("%s: condition %+v, want False/NotPaused", tc.name, later)
		}
		stored := &infrav1.RedfishHost{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), stored); err != nil {
			t.Fatal(err)
		}
		switch p := conditions.Get(stored, clusterv1.PausedCondition); {
		case tc.wantStored == "" && p != nil:
			t.Errorf("%s: stored Paused condition %v, want none written", tc.name, p)
		case tc.wantStored != "" && (p == nil || p.Status != tc.wantStored):
			t.Errorf("%s: stored Paused condition %v, want %s", tc.name, p, tc.wantStored)
		}
	}
}
