package onepatch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// writes records each write's kind and body.
type writes struct {
	client.Client
	log []string
}

func (w *writes) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	data, _ := p.Data(o)
	w.log = append(w.log, "patch "+string(data))
	return w.Client.Patch(ctx, o, p, opts...)
}

func (w *writes) Status() client.SubResourceWriter { return &statusWrites{w.Client.Status(), w} }

type statusWrites struct {
	client.SubResourceWriter
	w *writes
}

func (s *statusWrites) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	data, _ := p.Data(o)
	s.w.log = append(s.w.log, "status "+string(data))
	return s.SubResourceWriter.Patch(ctx, o, p, opts...)
}

// staleCache reads copy for every Get, as a cache behind the API server would; it writes
// through the client it embeds.
type staleCache struct {
	client.Client
	copy client.Object
}

func (s *staleCache) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	s.copy.DeepCopyObject().(*infrav1.RedfishHost).DeepCopyInto(obj.(*infrav1.RedfishHost))
	return nil
}

func setup(t *testing.T) (*writes, *infrav1.RedfishHost) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", Finalizers: []string{"f"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h).WithStatusSubresource(&infrav1.RedfishHost{}).Build()
	read := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), read); err != nil {
		t.Fatal(err)
	}
	return &writes{Client: c}, read
}

// A round that changes a state and its conditions writes them in one status patch; the object
// held is not overwritten by the API server's answer.
func TestARoundsStatusAndConditionsAreOneWrite(t *testing.T) {
	c, h := setup(t)
	helper := New(h, c)
	h.Status.State = infrav1.HostStateAvailable
	conditions.Set(h, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"})
	rv := h.ResourceVersion
	if err := helper.Patch(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if len(c.log) != 1 || c.log[0][:7] != "status " {
		t.Fatalf("writes %q, want one status patch", c.log)
	}
	var body map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.log[0][len("status "):]), &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["status"]["conditions"]; !ok || len(body) != 1 {
		t.Errorf("status patch %s, want the status alone, its conditions in it", c.log[0])
	}
	if h.ResourceVersion != rv {
		t.Errorf("the object held was overwritten (resourceVersion %s, was %s)", h.ResourceVersion, rv)
	}
	stored := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Status.State != infrav1.HostStateAvailable || !conditions.IsTrue(stored, infrav1.ReadyCondition) {
		t.Errorf("stored state %q, conditions %v", stored.Status.State, stored.Status.Conditions)
	}
}

// Metadata and spec go in a patch of their own (the status subresource ignores them), a round
// that changed nothing writes nothing, and a status field someone else wrote since the read is
// kept when the round did not change it.
func TestASpecChangeIsItsOwnPatchAndOthersStatusFieldsAreKept(t *testing.T) {
	c, h := setup(t)
	if err := New(h, c).Patch(t.Context(), h); err != nil || len(c.log) != 0 {
		t.Fatalf("an unchanged object: writes %q, err %v; want none", c.log, err)
	}
	other := h.DeepCopy()
	other.Status.Claim = &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Name: "m1"}}
	if err := c.Status().Update(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	c.log = nil
	helper := New(h, c) // the copy read before the claim
	h.Labels = map[string]string{"a": "b"}
	h.Status.State = infrav1.HostStateAvailable
	if err := helper.Patch(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if len(c.log) != 2 || c.log[0] != `patch {"metadata":{"labels":{"a":"b"}}}` || c.log[1] != `status {"status":{"state":"Available"}}` {
		t.Errorf("writes %q, want the labels, then the state", c.log)
	}
	stored := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Status.Claim == nil || stored.Labels["a"] != "b" || stored.Status.State != infrav1.HostStateAvailable {
		t.Errorf("stored labels %v, claim %v, state %q; want all three", stored.Labels, stored.Status.Claim, stored.Status.State)
	}
}

// A deleted object whose last finalizer the round removed is gone before its status is written:
// not an error.
func TestTheStatusOfAnObjectGoneWithItsLastFinalizerIsNotAnError(t *testing.T) {
	c, h := setup(t)
	if err := c.Delete(t.Context(), h.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), h); err != nil {
		t.Fatal(err)
	}
	helper := New(h, c)
	h.Finalizers = nil
	h.Status.State = infrav1.HostStateDeprovisioning
	if err := helper.Patch(t.Context(), h); err != nil {
		t.Errorf("writing a host gone with its finalizer: %v", err)
	}
	if len(c.log) != 2 {
		t.Errorf("writes %q, want the finalizer's, then the status tried", c.log)
	}
}

// Locked, a write fails with a Conflict the caller can tell once anyone wrote the object after the
// version given; on the version given, both writes land, the status on the version the first made.
func TestLockedWritesFailWithAConflictAfterSomeoneElsesWrite(t *testing.T) {
	c, h := setup(t)
	helper := New(h, c).Locked(h.ResourceVersion)
	h.Labels = map[string]string{"a": "b"}
	h.Status.State = infrav1.HostStateAvailable
	if err := helper.Patch(t.Context(), h); err != nil {
		t.Fatalf("on the version read: %v", err)
	}
	stored := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Labels["a"] != "b" || stored.Status.State != infrav1.HostStateAvailable {
		t.Fatalf("stored labels %v, state %q; want both written", stored.Labels, stored.Status.State)
	}
	// A round on the copy read before both writes.
	old := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), old); err != nil {
		t.Fatal(err)
	}
	old.ResourceVersion, old.Labels, old.Status.State = h.ResourceVersion, nil, ""
	helper = New(old, c).Locked(old.ResourceVersion)
	old.Status.State = infrav1.HostStateError
	err := helper.Patch(t.Context(), old)
	if !apierrors.IsConflict(err) {
		t.Errorf("a write locked on a version two writes old: %v, want a Conflict", err)
	}
}

// Locked, a metadata patch refused for the lock leaves the status unwritten (it would be refused
// too); one refused for another reason (a webhook down) still lets the status be written.
func TestLockedStatusFollowsOnlyAMetadataPatchNotRefusedForTheLock(t *testing.T) {
	for _, c := range []struct {
		name       string
		refusal    error
		wantStatus bool
	}{
		{"refused for the lock", apierrors.NewConflict(infrav1.GroupVersion.WithResource("redfishhosts").GroupResource(), "h1", errors.New("modified")), false},
		{"refused by a webhook", errors.New("failed calling webhook: connection refused"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, h := setup(t)
			w.Client = interceptor.NewClient(w.Client.(client.WithWatch), interceptor.Funcs{
				Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					return c.refusal
				},
			})
			helper := New(h, w).Locked(h.ResourceVersion)
			h.Labels = map[string]string{"a": "b"}
			h.Status.State = infrav1.HostStateAvailable
			err := helper.Patch(t.Context(), h)
			if apierrors.IsConflict(err) != apierrors.IsConflict(c.refusal) || err == nil {
				t.Errorf("error %v, want the refusal (%v)", err, c.refusal)
			}
			stored := &infrav1.RedfishHost{}
			if err := w.Get(t.Context(), client.ObjectKeyFromObject(h), stored); err != nil {
				t.Fatal(err)
			}
			if written := stored.Status.State == infrav1.HostStateAvailable; written != c.wantStatus {
				t.Errorf("status written: %v, want %v (writes %q)", written, c.wantStatus, w.log)
			}
		})
	}
}

// A condition another controller set is not overwritten by the owner's round: where the copy a
// round read holds a condition type the caller does not own, the round writes through CAPI's
// patch helper, which patches only the conditions the round changed onto the object as stored:
// the other controller's write since the read is kept, and the round's own lands. Without the
// foreign condition the round is one unlocked status patch.
func TestAConditionSetByAnotherControllerIsKept(t *testing.T) {
	c, h := setup(t)
	conditions.Set(h, metav1.Condition{Type: "SomeoneElses", Status: metav1.ConditionTrue, Reason: "Set"})
	if err := c.Status().Update(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	read := h.DeepCopy() // the owner's round reads this copy
	// The other controller writes its condition again after that read.
	conditions.Set(h, metav1.Condition{Type: "SomeoneElses", Status: metav1.ConditionFalse, Reason: "Changed"})
	if err := c.Status().Update(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	// The round's client reads a cache still at that copy; the API server has the newer write.
	cache := &staleCache{Client: c, copy: read.DeepCopy()}
	helper := New(read, cache).Owning(c, infrav1.ReadyCondition)
	conditions.Set(read, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"})
	read.Status.State = infrav1.HostStateAvailable
	held := read.DeepCopy()
	if err := helper.Patch(t.Context(), read); err != nil {
		t.Fatalf("a round on a copy older than another controller's condition: %v", err)
	}
	if !equality.Semantic.DeepEqual(held, read) {
		t.Errorf("the object held was changed by the write")
	}
	stored := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), stored); err != nil {
		t.Fatal(err)
	}
	if got := conditions.Get(stored, "SomeoneElses"); got == nil || got.Reason != "Changed" {
		t.Errorf("the other controller's condition is %v, want its own last write (Changed)", got)
	}
	if !conditions.IsTrue(stored, infrav1.ReadyCondition) || stored.Status.State != infrav1.HostStateAvailable {
		t.Errorf("stored state %q, conditions %v; want the round's Ready and state", stored.Status.State, stored.Status.Conditions)
	}
	// Owning only what the object holds, the round is one status patch without a lock.
	c2, h2 := setup(t)
	helper = New(h2, c2).Owning(c2, infrav1.ReadyCondition)
	conditions.Set(h2, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"})
	if err := helper.Patch(t.Context(), h2); err != nil {
		t.Fatal(err)
	}
	if len(c2.log) != 1 || strings.Contains(c2.log[0], "resourceVersion") {
		t.Errorf("writes %q, want one status patch without a lock", c2.log)
	}
}
