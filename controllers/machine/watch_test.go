package machine

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// A workload cluster's Node wakes the machine its providerID names, in its Cluster's namespace
// only.
func TestNodeToMachine(t *testing.T) {
	node := func(id string) *corev1.Node { return &corev1.Node{Spec: corev1.NodeSpec{ProviderID: id}} }
	m := nodeToMachine("rack")
	if got := m(context.Background(), node("redfish://rack/server-1/workers-a")); len(got) != 1 || got[0].Namespace != "rack" || got[0].Name != "workers-a" {
		t.Errorf("own namespace: %v", got)
	}
	for _, id := range []string{"redfish://other/server-1/workers-a", "aws:///i-1", ""} {
		if got := m(context.Background(), node(id)); len(got) != 0 {
			t.Errorf("providerID %q woke %v", id, got)
		}
	}
}

// A host dropping a machine's claim wakes that machine (its deletion waits for exactly that),
// though the host no longer names it.
func TestAReleasedHostWakesTheMachineThatHeldIt(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).Build()}
	held := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "rack", Name: "h1"}}
	held.Status.State = infrav1.HostStateCleaning
	held.Status.Claim = &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Namespace: "rack", Name: "m1"}, Release: true}
	released := held.DeepCopy()
	released.Status.Claim, released.Status.State = nil, infrav1.HostStateAvailable

	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	r.hostHandler().Update(context.Background(), event.UpdateEvent{ObjectOld: held, ObjectNew: released}, q)
	if q.Len() != 1 {
		t.Fatalf("%d machines woken, want m1", q.Len())
	}
	if req, _ := q.Get(); req.Name != "m1" || req.Namespace != "rack" {
		t.Errorf("woke %v, want rack/m1", req)
	}
}

// A patch that failed only because the machine is gone (an earlier round removed its finalizer)
// is no error; any other failure is.
func TestAllNotFound(t *testing.T) {
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "redfishmachines"}, "m1")
	if !allNotFound(fmt.Errorf("failed to patch: %w", kerrors.NewAggregate([]error{fmt.Errorf("spec: %w", gone), gone}))) {
		t.Error("an aggregate of NotFound errors is not NotFound")
	}
	if allNotFound(kerrors.NewAggregate([]error{gone, apierrors.NewConflict(schema.GroupResource{}, "m1", nil)})) {
		t.Error("a conflict was ignored")
	}
}
