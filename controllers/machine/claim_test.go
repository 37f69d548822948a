package machine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// A Machine of the owner a Reuse maintenance gives its host back to waits for that host, even
// when a spare is free: the maintenance still holds the host for a moment after the release.
func TestMachineWaitsForTheHostAReuseMaintenanceGivesBack(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	owner := &infrav1.ObjectRef{APIGroup: clusterv1.GroupVersion.Group, Kind: "MachineDeployment", Namespace: "ns", Name: "workers"}
	available := func(name string, reservedFor *infrav1.ObjectRef) infrav1.RedfishHost {
		h := infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		h.Status.State, h.Status.ReservedFor = infrav1.HostStateAvailable, reservedFor
		return h
	}
	hosts := []infrav1.RedfishHost{available("reused", owner), available("spare", nil)}
	for _, tc := range []struct {
		mode  expv1.MaintenanceMode
		stage expv1.MaintenanceStage
		wait  bool
	}{
		{expv1.Reuse, expv1.StageInMaintenance, true},
		{expv1.Reuse, expv1.StageDraining, true},
		// Waiting for budget or a window: a Machine of the owner waiting for it would use up the
		// budget the maintenance waits for.
		{expv1.Reuse, expv1.StageApproved, false},
		{expv1.Reuse, expv1.StageFailed, false},
		{expv1.Replace, expv1.StageInMaintenance, false},
	} {
		mode := tc.mode
		m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bios"},
			Spec:   expv1.RedfishMaintenanceSpec{HostName: "reused", Mode: mode},
			Status: expv1.RedfishMaintenanceStatus{Stage: tc.stage}}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(m).Build()
		r := &Reconciler{Client: c, APIReader: c}
		s := &scope{rm: &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers-new"}}, machine: &clusterv1.Machine{}}
		got, waiting, err := r.candidates(context.Background(), s, hosts, owner, "")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.wait:
			if len(got) != 0 || !strings.Contains(waiting, "maintenance bios (mode Reuse) gives host reused back") {
				t.Errorf("%s %s: candidates %d, waiting %q; want none, waiting for the host", mode, tc.stage, len(got), waiting)
			}
		default:
			if len(got) != 1 || got[0].Name != "spare" || waiting != "" {
				t.Errorf("%s %s: candidates %v, waiting %q; want the spare", mode, tc.stage, got, waiting)
			}
		}
	}
}

// A host with a RedfishJob not finished (waiting or running), or whose lease a maintenance holds,
// is not offered to a Machine: the claim would fight the job or the flash over the host's BMC. A
// finished job does not keep it out.
func TestAHostWithAnUnfinishedJobIsNotClaimed(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	available := func(name string) infrav1.RedfishHost {
		h := infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		h.Status.State = infrav1.HostStateAvailable
		return h
	}
	leased := available("leased") // a maintenance flashes it
	leased.Status.Lease = &infrav1.HostLease{Holder: infrav1.ObjectRef{Kind: "RedfishMaintenance", Name: "fw"}, HolderUID: "u"}
	hosts := []infrav1.RedfishHost{available("busy"), available("done"), available("free"), leased}
	job := func(name, host string, finished bool) *infrav1.RedfishJob {
		j := &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: infrav1.RedfishJobSpec{HostName: host}}
		if finished {
			now := metav1.NowMicro()
			j.Status.CompletionTime = &now
		}
		return j
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(job("cycle", "busy", false), job("old", "done", true)).Build()
	r := &Reconciler{Client: c, APIReader: c}
	s := &scope{rm: &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}, machine: &clusterv1.Machine{}}
	got, _, err := r.candidates(context.Background(), s, hosts, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range got {
		names = append(names, h.Name)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "done,free" {
		t.Errorf("candidates %v, want done and free (not busy, whose job is not finished, nor leased, which a maintenance flashes)", names)
	}
}

// hostLists counts the RedfishHost lists a reconcile makes.
type hostLists struct {
	client.Client
	n int
}

func (c *hostLists) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if _, ok := l.(*infrav1.RedfishHostList); ok {
		c.n++
	}
	return c.Client.List(ctx, l, opts...)
}

// A machine holding its host (every round of its life after the claim) reads that host alone:
// at N = 1000 each round listed and copied every host of the namespace, half the manager's CPU
// while provisioning. A machine whose record is stale still finds the host that holds its claim.
func TestAMachineThatHoldsItsHostReadsOnlyThatHost(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	rm := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers-1", UID: "rm-uid"}}
	host := func(name string, claimedBy *infrav1.RedfishMachine) *infrav1.RedfishHost {
		h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		h.Status.State = infrav1.HostStateAvailable
		if claimedBy != nil {
			h.Status.State = infrav1.HostStateProvisioned
			h.Status.Claim = &infrav1.HostClaim{ConsumerUID: string(claimedBy.UID), Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Namespace: "ns", Name: claimedBy.Name}}
		}
		return h
	}
	for _, tc := range []struct {
		name      string
		hostRef   string
		wantLists int
	}{
		{"the recorded host holds the claim", "u07", 0},
		{"nothing recorded yet (the claim was written, the record not)", "", 1},
		{"the record names a host that does not hold the claim", "u08", 1},
	} {
		c := &hostLists{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(host("u07", rm), host("u08", nil), host("u09", nil)).WithStatusSubresource(&infrav1.RedfishHost{}).Build()}
		r := &Reconciler{Client: c, APIReader: c}
		s := &scope{rm: rm.DeepCopy(), machine: &clusterv1.Machine{}}
		s.rm.Status.HostRef = tc.hostRef
		if _, err := r.claimHost(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if s.host == nil || s.host.Name != "u07" || s.rm.Status.HostRef != "u07" {
			t.Fatalf("%s: host %v, hostRef %q; want u07", tc.name, s.host, s.rm.Status.HostRef)
		}
		if c.n != tc.wantLists {
			t.Errorf("%s: %d lists of hosts, want %d", tc.name, c.n, tc.wantLists)
		}
	}
}

// newMachineWorld is a fake API server with a Cluster whose infrastructure is provisioned, its
// Machine m1 with bootstrap data, that Machine's new RedfishMachine (no finalizer, no condition)
// and an Available host h1.
// newMachineWorld is a Cluster, a Machine, its new RedfishMachine (generation 1) and an Available
// host; the API server's answers go through funcs, when given.
func newMachineWorld(t *testing.T, funcs ...interceptor.Funcs) (client.Client, *infrav1.RedfishMachine, *infrav1.RedfishHost) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1", UID: "m-uid", Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}},
		Spec: clusterv1.MachineSpec{ClusterName: "c1", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("m1-bootstrap")}}}
	rm := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1", UID: "rm-uid", Generation: 1, Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "m1", UID: "m-uid"}}},
		Spec: infrav1.RedfishMachineSpec{Image: &infrav1.Image{URL: "http://images.example/os.iso"}}}
	host := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1"}}
	host.Status.State = infrav1.HostStateAvailable
	bootstrap := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1-bootstrap"}, Data: map[string][]byte{"value": []byte("#cloud-config")}}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cluster, machine, rm, host, bootstrap).
		WithStatusSubresource(&infrav1.RedfishHost{}, &infrav1.RedfishMachine{})
	for _, f := range funcs {
		b = b.WithInterceptorFuncs(f)
	}
	return b.Build(), rm, host
}

// notConnected is a ClusterCache with no connection to any workload cluster.
type notConnected struct{ clustercache.ClusterCache }

func (notConnected) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	return nil, errors.New("not connected")
}

// A new RedfishMachine claims its host in its first round with an owner: the finalizer is stored
// first, and the Paused condition goes with the round's write. CAPI's EnsurePausedCondition wrote
// it alone and asked for a round, and a round then stored the finalizer alone: two writes and two
// waits for the cache for every Machine of a rollout, before its host was even chosen.
func TestANewMachineClaimsItsHostInItsFirstRound(t *testing.T) {
	c, rm, host := newMachineWorld(t)
	r := &Reconciler{Client: c, APIReader: c, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}); err != nil {
		t.Fatal(err)
	}
	gotRM, gotHost := &infrav1.RedfishMachine{}, &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(rm), gotRM); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(host), gotHost); err != nil {
		t.Fatal(err)
	}
	if gotHost.Status.Claim == nil || gotHost.Status.Claim.ConsumerUID != string(rm.UID) || gotRM.Status.HostRef != "h1" {
		t.Errorf("after the first round: host claim %+v, hostRef %q; want h1 claimed by m1", gotHost.Status.Claim, gotRM.Status.HostRef)
	}
	if !slices.Contains(gotRM.Finalizers, infrav1.MachineFinalizer) {
		t.Errorf("finalizers %v, want %s", gotRM.Finalizers, infrav1.MachineFinalizer)
	}
	if p := conditions.Get(gotRM, infrav1.PausedCondition); p == nil || p.Status != metav1.ConditionFalse {
		t.Errorf("Paused condition %v, want False", p)
	}
}

// cachedReads reads from a cache and writes to the API server, as a manager's client does.
type cachedReads struct {
	client.Client // the API server
	cache         client.Reader
}

func (c cachedReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.cache.Get(ctx, key, obj, opts...)
}

func (c cachedReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.cache.List(ctx, list, opts...)
}

// snapshot is a cache of newMachineWorld's objects as the API server has them now, that never
// catches up.
func snapshot(t *testing.T, api client.Client) client.Reader {
	t.Helper()
	objs := []client.Object{&clusterv1.Cluster{}, &clusterv1.Machine{}, &infrav1.RedfishMachine{}, &infrav1.RedfishHost{}}
	for i, key := range []client.ObjectKey{{Namespace: "ns", Name: "c1"}, {Namespace: "ns", Name: "m1"}, {Namespace: "ns", Name: "m1"}, {Namespace: "ns", Name: "h1"}} {
		if err := api.Get(t.Context(), key, objs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return fake.NewClientBuilder().WithScheme(api.Scheme()).WithObjects(objs...).Build()
}

// A new machine's first round stores its finalizer (and, when it claims a host, its providerID),
// then writes its conditions with the resourceVersion as a lock (CAPI's patch helper reads the
// machine again for it). Read from a cache that has not seen those writes yet (the usual case a
// moment after them), that version conflicted and the helper slept 100-200 ms before each try;
// here the cache never catches up, so without the round's own copy the round fails after five
// tries.
func TestANewMachinesFirstWriteDoesNotConflictWithItsOwnFinalizer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hostFor string // the consumer already holding h1 ("": h1 is Available)
		claimed metav1.ConditionStatus
	}{
		{name: "a host claimed: the finalizer and the providerID written first", claimed: metav1.ConditionTrue},
		{name: "no host to claim: only the finalizer written first", hostFor: "other", claimed: metav1.ConditionFalse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, rm, host := newMachineWorld(t)
			if tc.hostFor != "" {
				h := &infrav1.RedfishHost{}
				if err := api.Get(t.Context(), client.ObjectKeyFromObject(host), h); err != nil {
					t.Fatal(err)
				}
				h.Status.State = infrav1.HostStateProvisioning
				h.Status.Claim = &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Namespace: "ns", Name: tc.hostFor}, ConsumerUID: "other-uid"}
				if err := api.Status().Update(t.Context(), h); err != nil {
					t.Fatal(err)
				}
			}
			r := &Reconciler{Client: cachedReads{Client: api, cache: snapshot(t, api)}, APIReader: api, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}); err != nil {
				t.Fatal(err)
			}
			got := &infrav1.RedfishMachine{}
			if err := api.Get(t.Context(), client.ObjectKeyFromObject(rm), got); err != nil {
				t.Fatal(err)
			}
			if c := conditions.Get(got, infrav1.HostClaimedCondition); c == nil || c.Status != tc.claimed {
				t.Errorf("HostClaimed %v, want %s written in the first round", c, tc.claimed)
			}
		})
	}
}

// A new machine's first round sets its providerID (a spec change: the API server moves
// metadata.generation on) and its conditions. The conditions carry the generation the spec write
// makes, so the round after writes nothing: they had carried the one before, and the next round
// wrote every condition again only to update that number.
func TestTheRoundAfterTheClaimWritesNothingWhenNothingChanged(t *testing.T) {
	writes := 0
	api, rm, _ := newMachineWorld(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			writes++
			before, isMachine := obj.DeepCopyObject().(*infrav1.RedfishMachine)
			if isMachine {
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), before); err != nil {
					return err
				}
			}
			if err := c.Patch(ctx, obj, p, opts...); err != nil || !isMachine {
				return err
			}
			// The API server's part: a spec change moves the generation on.
			if after := obj.(*infrav1.RedfishMachine); !equality.Semantic.DeepEqual(before.Spec, after.Spec) {
				after.Generation = before.Generation + 1
				return c.Update(ctx, after)
			}
			return nil
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes++
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes++
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			writes++
			return c.Delete(ctx, obj, opts...)
		},
	})
	r := &Reconciler{Client: api, APIReader: api, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}
	// The maintenance controller announced a maintenance at generation 1: its condition is its
	// own, and the machine's spec write does not make it claim a generation it never saw.
	announced := &infrav1.RedfishMachine{}
	if err := api.Get(t.Context(), req.NamespacedName, announced); err != nil {
		t.Fatal(err)
	}
	conditions.Set(announced, metav1.Condition{Type: infrav1.MaintenancePlannedCondition, Status: metav1.ConditionTrue,
		Reason: infrav1.MaintenanceAnnouncedReason, ObservedGeneration: announced.Generation})
	if err := api.Status().Update(t.Context(), announced); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	got := &infrav1.RedfishMachine{}
	if err := api.Get(t.Context(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.ProviderID == "" || got.Generation < 2 {
		t.Fatalf("after the first round: providerID %q, generation %d; want the providerID set and the generation moved on", got.Spec.ProviderID, got.Generation)
	}
	for _, c := range got.Status.Conditions {
		want := got.Generation
		if c.Type == infrav1.MaintenancePlannedCondition {
			want = announced.Generation // the maintenance controller's, as it wrote it
		}
		if c.ObservedGeneration != want {
			t.Errorf("condition %s observed generation %d, want %d", c.Type, c.ObservedGeneration, want)
		}
	}
	if !conditions.IsTrue(got, infrav1.MaintenancePlannedCondition) {
		t.Errorf("conditions %v: the announcement was lost", got.Status.Conditions)
	}
	writes = 0
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if writes != 0 {
		t.Errorf("the round after the claim, with nothing changed, made %d writes; want none", writes)
	}
}

// When the providerID cannot be written (say the RedfishMachine webhook is down: spec writes go
// through it, status writes do not), the round still records its claim (hostRef; a machine that
// lost it would claim another host next round), and no condition claims a generation the machine
// never reached.
func TestARoundWhoseSpecWriteFailsStillRecordsItsClaim(t *testing.T) {
	api, rm, _ := newMachineWorld(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if data, _ := p.Data(obj); strings.Contains(string(data), "providerID") {
				return errors.New("failed calling webhook: connection refused")
			}
			return c.Patch(ctx, obj, p, opts...)
		},
	})
	r := &Reconciler{Client: api, APIReader: api, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}); err == nil {
		t.Fatal("the round reported no error; want the failed spec write")
	}
	got := &infrav1.RedfishMachine{}
	if err := api.Get(t.Context(), client.ObjectKeyFromObject(rm), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.ProviderID != "" || got.Status.HostRef != "h1" {
		t.Errorf("after a failed spec write: providerID %q, hostRef %q; want no providerID and the claim of h1 recorded", got.Spec.ProviderID, got.Status.HostRef)
	}
	for _, c := range got.Status.Conditions {
		if c.ObservedGeneration > got.Generation {
			t.Errorf("condition %s observed generation %d, beyond the machine's %d", c.Type, c.ObservedGeneration, got.Generation)
		}
	}
}

// machineReads counts the RedfishMachines read through it (the API server's reads of them).
type machineReads struct {
	client.Reader
	gets int
}

func (m *machineReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*infrav1.RedfishMachine); ok {
		m.gets++
	}
	return m.Reader.Get(ctx, key, obj, opts...)
}

// A round that finds the cache behind the controller's own last write of the machine (woken by
// its host a moment after that write) does nothing and comes back. It had computed the last
// round's changes again, and its conditions patch, locked to the old version, conflicted and
// slept 100-200 ms per try (here the cache never catches up: five tries, then an error). Once the
// cache has the write, the round reads it there.
func TestAMachineRoundOnACacheBehindItsOwnLastWriteWaitsForIt(t *testing.T) {
	api, rm, _ := newMachineWorld(t)
	cache := &struct{ client.Reader }{api}
	reads := &machineReads{Reader: api}
	r := &Reconciler{Client: cachedReads{Client: api, cache: cache}, APIReader: reads, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
	r.readFresh() // as SetupWithManager does
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}
	if _, err := r.Reconcile(t.Context(), req); err != nil { // the finalizer, the claim of h1
		t.Fatal(err)
	}
	written := &infrav1.RedfishMachine{}
	if err := api.Get(t.Context(), req.NamespacedName, written); err != nil || written.Status.HostRef != "h1" {
		t.Fatalf("first round: %v, hostRef %q; want h1 claimed", err, written.Status.HostRef)
	}
	// The cache has the finalizer, not yet the round's status writes.
	behind := written.DeepCopy()
	behind.Status = infrav1.RedfishMachineStatus{}
	rv, _ := strconv.Atoi(written.ResourceVersion)
	behind.ResourceVersion = strconv.Itoa(rv - 1)
	others := snapshot(t, api)
	stale := fake.NewClientBuilder().WithScheme(api.Scheme()).WithObjects(behind).Build()
	cache.Reader = splitReader{machines: stale, rest: others}
	reads.gets = 0
	res, err := r.Reconcile(t.Context(), req)
	after := &infrav1.RedfishMachine{}
	if gerr := api.Get(t.Context(), req.NamespacedName, after); gerr != nil {
		t.Fatal(gerr)
	}
	if err != nil || res.RequeueAfter != r.PollInterval || reads.gets != 0 || after.ResourceVersion != written.ResourceVersion {
		t.Errorf("round on a cache behind: %v, %+v, %d API reads, resourceVersion %s -> %s; want nothing read or written, back in PollInterval",
			err, res, reads.gets, written.ResourceVersion, after.ResourceVersion)
	}
	cache.Reader = snapshot(t, api) // the cache catches up
	if _, err := r.Reconcile(t.Context(), req); err != nil || reads.gets != 0 {
		t.Errorf("round on the caught-up cache: %v, %d API reads of the machine; want it read from the cache", err, reads.gets)
	}
}

// splitReader reads RedfishMachines from machines and everything else from rest.
type splitReader struct{ machines, rest client.Reader }

func (s splitReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*infrav1.RedfishMachine); ok {
		return s.machines.Get(ctx, key, obj, opts...)
	}
	return s.rest.Get(ctx, key, obj, opts...)
}

func (s splitReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*infrav1.RedfishMachineList); ok {
		return s.machines.List(ctx, list, opts...)
	}
	return s.rest.List(ctx, list, opts...)
}

// The finalizer a new machine stores is written against the version it read: a machine read from
// a cache behind someone else's change (another finalizer added) neither drops that finalizer
// nor claims a host in that round; the newer version wakes it.
func TestANewMachineReadFromAStaleCacheLosesNoOtherFinalizer(t *testing.T) {
	api, rm, host := newMachineWorld(t)
	cache := snapshot(t, api)
	// Someone adds a finalizer the cache has not seen yet.
	other := &infrav1.RedfishMachine{}
	if err := api.Get(t.Context(), client.ObjectKeyFromObject(rm), other); err != nil {
		t.Fatal(err)
	}
	other.Finalizers = append(other.Finalizers, "example.com/backup")
	if err := api.Update(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: cachedReads{Client: api, cache: cache}, APIReader: api, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}); err != nil {
		t.Fatal(err)
	}
	gotRM, gotHost := &infrav1.RedfishMachine{}, &infrav1.RedfishHost{}
	if err := api.Get(t.Context(), client.ObjectKeyFromObject(rm), gotRM); err != nil {
		t.Fatal(err)
	}
	if err := api.Get(t.Context(), client.ObjectKeyFromObject(host), gotHost); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(gotRM.Finalizers, "example.com/backup") || gotHost.Status.Claim != nil {
		t.Errorf("finalizers %v, host claim %+v; want the other finalizer kept and no claim this round", gotRM.Finalizers, gotHost.Status.Claim)
	}
}

// The round that claims a host writes the machine's status, conditions included, once: CAPI's
// patch helper wrote the conditions apart. The maintenance controller sets a condition of the
// machine too (MaintenancePlanned): where it wrote the machine after the round read it, CAPI's
// helper merges both, so neither condition is lost: at once where the round's providerID write
// answered with that status, after the locked write is refused where it came after.
func TestAMachineRoundIsOneStatusWriteAndKeepsAConditionWrittenMeanwhile(t *testing.T) {
	for _, meanwhile := range []string{"", "before the spec write", "before the status write"} {
		t.Run("maintenance announced "+meanwhile, func(t *testing.T) {
			var statusWrites []string
			announced := false
			announce := func(ctx context.Context, cw client.Client, obj client.Object) error {
				if _, ok := obj.(*infrav1.RedfishMachine); !ok || announced {
					return nil
				}
				announced = true // the maintenance controller's write lands first
				other := &infrav1.RedfishMachine{}
				if err := cw.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
					return err
				}
				before := other.DeepCopy()
				conditions.Set(other, metav1.Condition{Type: infrav1.MaintenancePlannedCondition, Status: metav1.ConditionTrue, Reason: infrav1.MaintenanceAnnouncedReason})
				return cw.Status().Patch(ctx, other, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
			}
			c, rm, _ := newMachineWorld(t, interceptor.Funcs{
				Patch: func(ctx context.Context, cw client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
					if data, _ := p.Data(obj); meanwhile == "before the spec write" && strings.Contains(string(data), "providerID") {
						if err := announce(ctx, cw, obj); err != nil {
							return err
						}
					}
					return cw.Patch(ctx, obj, p, opts...)
				},
				SubResourcePatch: func(ctx context.Context, cw client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					if meanwhile == "before the status write" {
						if err := announce(ctx, cw, obj); err != nil {
							return err
						}
					}
					err := cw.Status().Patch(ctx, obj, p, opts...)
					if _, ok := obj.(*infrav1.RedfishMachine); ok {
						statusWrites = append(statusWrites, fmt.Sprintf("%q", apierrors.ReasonForError(err)))
					}
					return err
				},
			})
			r := &Reconciler{Client: c, APIReader: c, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}); err != nil {
				t.Fatal(err)
			}
			got := &infrav1.RedfishMachine{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(rm), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.HostRef != "h1" || got.Spec.ProviderID == "" || !conditions.IsTrue(got, infrav1.HostClaimedCondition) {
				t.Errorf("hostRef %q, providerID %q, HostClaimed %v; want h1 claimed", got.Status.HostRef, got.Spec.ProviderID, conditions.Get(got, infrav1.HostClaimedCondition))
			}
			if meanwhile == "" {
				if len(statusWrites) != 1 {
					t.Errorf("status writes %v; want one", statusWrites)
				}
				return
			}
			if !conditions.IsTrue(got, infrav1.MaintenancePlannedCondition) {
				t.Errorf("conditions %v: the MaintenancePlanned condition written meanwhile was lost", got.Status.Conditions)
			}
			// Seen in the spec write's answer, the helper writes at once; unseen, the lock refuses.
			refused := len(statusWrites) > 0 && statusWrites[0] == fmt.Sprintf("%q", metav1.StatusReasonConflict)
			if wantRefused := meanwhile == "before the status write"; len(statusWrites) < 2 || refused != wantRefused {
				t.Errorf("status writes %v; want CAPI's helper's two, after a refused locked write: %v", statusWrites, wantRefused)
			}
		})
	}
}

// allNotFound sees NotFound through wrapping, CAPI's aggregates and errors.Join (onepatch), only when
// every error is one.
func TestAllNotFoundThroughJoinsAndAggregates(t *testing.T) {
	gone := apierrors.NewNotFound(infrav1.GroupVersion.WithResource("redfishmachines").GroupResource(), "m1")
	refused := errors.New("failed calling webhook")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{gone, true},
		{refused, false},
		{fmt.Errorf("patching: %w", gone), true},
		{errors.Join(gone, fmt.Errorf("status: %w", gone)), true},
		{errors.Join(refused, fmt.Errorf("helper: %w", kerrors.NewAggregate([]error{gone}))), false},
		{fmt.Errorf("helper: %w", kerrors.NewAggregate([]error{gone, gone})), true},
		{kerrors.NewAggregate([]error{gone, refused}), false},
		{fmt.Errorf("write: %w", errors.Join(gone, refused)), false},
		{fmt.Errorf("write: %w", errors.Join(gone, gone)), true},
	} {
		if got := allNotFound(c.err); got != c.want {
			t.Errorf("allNotFound(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A machine whose host was claimed by someone else (the host's status restored, an operator's
// edit) says ClaimLost and waits; its round neither panics nor takes another host.
func TestAMachineWhoseClaimWasLostSaysSoWithoutPanicking(t *testing.T) {
	for _, withProviderID := range []bool{false, true} {
		c, rm, host := newMachineWorld(t)
		ctx := t.Context()
		if withProviderID {
			rm.Spec.ProviderID = "redfish://ns/h1/m1"
			if err := c.Update(ctx, rm); err != nil {
				t.Fatal(err)
			}
		}
		rm.Status.HostRef = "h1"
		if err := c.Status().Update(ctx, rm); err != nil {
			t.Fatal(err)
		}
		host.Status.State = infrav1.HostStateProvisioned
		host.Status.Claim = &infrav1.HostClaim{Consumer: infrav1.ObjectRef{APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachine", Namespace: "ns", Name: "other"}, ConsumerUID: "other-uid"}
		if err := c.Status().Update(ctx, host); err != nil {
			t.Fatal(err)
		}
		h2 := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h2"}}
		if err := c.Create(ctx, h2); err != nil {
			t.Fatal(err)
		}
		h2.Status.State = infrav1.HostStateAvailable
		if err := c.Status().Update(ctx, h2); err != nil {
			t.Fatal(err)
		}
		r := &Reconciler{Client: c, APIReader: c, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
		var res ctrl.Result
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("providerID %t: the round panicked: %v", withProviderID, p)
				}
			}()
			res, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)})
		}()
		if err != nil {
			t.Fatalf("providerID %t: %v", withProviderID, err)
		}
		got, gotH2 := &infrav1.RedfishMachine{}, &infrav1.RedfishHost{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rm), got); err != nil {
			t.Fatal(err)
		}
		if cond := conditions.Get(got, infrav1.HostClaimedCondition); cond == nil || cond.Reason != "ClaimLost" {
			t.Errorf("providerID %t: HostClaimed %+v, want reason ClaimLost", withProviderID, cond)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(h2), gotH2); err != nil || gotH2.Status.Claim != nil {
			t.Errorf("providerID %t: h2 claim %+v (%v); a machine that lost its host must not take another", withProviderID, gotH2.Status.Claim, err)
		}
		if res.RequeueAfter == 0 {
			t.Errorf("providerID %t: result %+v, want a later look", withProviderID, res)
		}
	}
}

// A claim whose answer was lost (the update landed, then a timeout) is not followed by a claim of
// another host: the next round, reading a cache that has not seen the claim yet, asks the API
// server about the host it tried, finds it holds this machine's claim and keeps it.
func TestAClaimWhoseAnswerWasLostLeavesExactlyOneHostClaimed(t *testing.T) {
	lost := false
	api, rm, _ := newMachineWorld(t, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := c.SubResource(sub).Update(ctx, obj, opts...); err != nil {
				return err
			}
			if _, isHost := obj.(*infrav1.RedfishHost); isHost && lost {
				lost = false
				return apierrors.NewTimeoutError("the answer was lost", 1)
			}
			return nil
		},
	})
	ctx := t.Context()
	h2 := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h2"}}
	if err := api.Create(ctx, h2); err != nil {
		t.Fatal(err)
	}
	h2.Status.State = infrav1.HostStateAvailable
	if err := api.Status().Update(ctx, h2); err != nil {
		t.Fatal(err)
	}
	// The cache holds both hosts Available and never sees the claim; machines are read from the
	// API server (a machine read from the frozen cache would stop each round at its own write).
	var objs []client.Object
	for _, name := range []string{"c1", "m1", "h1", "h2", "m1-bootstrap"} {
		for _, obj := range []client.Object{&clusterv1.Cluster{}, &clusterv1.Machine{}, &infrav1.RedfishHost{}, &corev1.Secret{}} {
			if err := api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, obj); err == nil {
				objs = append(objs, obj)
			}
		}
	}
	stale := fake.NewClientBuilder().WithScheme(api.Scheme()).WithObjects(objs...).Build()
	r := &Reconciler{Client: cachedReads{Client: api, cache: splitReader{machines: api, rest: stale}}, APIReader: api, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
	lost = true // the first claim's answer
	for range 3 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}); err != nil {
			t.Logf("round: %v", err)
		}
	}
	claimed := []string{}
	for _, name := range []string{"h1", "h2"} {
		h := &infrav1.RedfishHost{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, h); err != nil {
			t.Fatal(err)
		}
		if h.Status.Claim != nil && h.Status.Claim.ConsumerUID == string(rm.UID) {
			claimed = append(claimed, name)
		}
	}
	got := &infrav1.RedfishMachine{}
	if err := api.Get(ctx, client.ObjectKeyFromObject(rm), got); err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || got.Status.HostRef != claimed[0] {
		t.Errorf("hosts claimed by the machine %v, hostRef %q; want exactly one, the one recorded (conditions %+v)", claimed, got.Status.HostRef, got.Status.Conditions)
	}
}

// A RedfishMachine being deleted whose Machine (and Cluster) were force-removed still releases
// its host and then lets go of its finalizer: it does not wait for owners that will never come.
func TestAMachineWhoseMachineAndClusterAreGoneFinishesDeleting(t *testing.T) {
	c, rm, _ := newMachineWorld(t)
	ctx := t.Context()
	r := &Reconciler{Client: c, APIReader: c, ClusterCache: notConnected{}, PollInterval: 2 * time.Second}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rm)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	h := &infrav1.RedfishHost{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "h1"}, h); err != nil || h.Status.Claim == nil {
		t.Fatalf("h1 not claimed (%v)", err)
	}
	for _, o := range []client.Object{&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1"}}, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}, rm} {
		if err := c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "h1"}, h); err != nil || h.Status.Claim == nil || !h.Status.Claim.Release {
		t.Fatalf("h1 claim %+v (%v): want the claim released", h.Status.Claim, err)
	}
	// The host controller's part: the release done, the claim gone.
	h.Status.Claim, h.Status.State = nil, infrav1.HostStateAvailable
	if err := c.Status().Update(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, &infrav1.RedfishMachine{}); !apierrors.IsNotFound(err) {
		t.Errorf("the RedfishMachine is still there (%v): its finalizer was kept", err)
	}
}
