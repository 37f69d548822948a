package fresh

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/apireads"
)

// An object is read from the cache when the cache holds the version this controller last wrote
// or read, or a newer one (anyone else's later write includes this controller's). A cache a write
// behind (which would repeat the action the last round recorded) is not read, nor is the API
// server asked: the round ends (ErrStale), as the write's watch event will wake it again.
func TestAnObjectIsReadFromTheCacheWhenItHasTheLastWriteOrNewer(t *testing.T) {
	ctx := context.Background()
	scheme, h, key := oneHost(t)
	apiServer := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h).WithStatusSubresource(h).Build()
	// The cache: a copy of the API server's host (resourceVersion included) as of the last sync.
	var cache client.Client
	sync := func() {
		cur := &infrav1.RedfishHost{}
		if err := apiServer.Get(ctx, key, cur); err != nil {
			t.Fatal(err)
		}
		cache = fake.NewClientBuilder().WithScheme(scheme).WithObjects(cur).Build()
	}
	sync()
	api := &apireads.Counter{Reader: apiServer}
	f := &Reads{Kind: infrav1.GroupVersion.WithKind("RedfishHost")}
	read := func() (*infrav1.RedfishHost, error) {
		h := &infrav1.RedfishHost{}
		return h, f.Get(ctx, cache, api, key, h)
	}

	if _, err := read(); err != nil || api.Gets != 1 {
		t.Fatalf("first read: %v, %d API reads, want 1 (nothing known yet)", err, api.Gets)
	}
	if _, err := read(); err != nil || api.Gets != 1 {
		t.Fatalf("second read of an unchanged host: %v, %d API reads, want still 1", err, api.Gets)
	}

	// This controller writes the host; the cache has not seen the write yet.
	w := f.Client(apiServer)
	cur := &infrav1.RedfishHost{}
	_ = apiServer.Get(ctx, key, cur)
	before := cur.DeepCopy()
	cur.Status.State = infrav1.HostStateProvisioning
	if err := w.Status().Patch(ctx, cur, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if _, err := read(); !errors.Is(err, ErrStale) || api.Gets != 1 {
		t.Fatalf("read after a write the cache lacks: %v, %d API reads; want ErrStale and no API read", err, api.Gets)
	}
	// A cache behind for Patience (a watch down): the API server is asked, once.
	now := time.Now()
	f.now = func() time.Time { return now }
	f.remember(key, cur.ResourceVersion) // learnt now
	now = now.Add(Patience - time.Second)
	if _, err := read(); !errors.Is(err, ErrStale) || api.Gets != 1 {
		t.Fatalf("read of a cache behind for less than Patience: %v, %d API reads; want ErrStale", err, api.Gets)
	}
	now = now.Add(time.Second)
	got, err := read()
	if err != nil || got.Status.State != infrav1.HostStateProvisioning || api.Gets != 2 {
		t.Fatalf("read of a cache behind for Patience: state %q, %v, %d API reads; want the written state from the API server", got.Status.State, err, api.Gets)
	}
	sync()
	got, err = read()
	if err != nil || got.Status.State != infrav1.HostStateProvisioning || api.Gets != 2 {
		t.Fatalf("read once the cache has the write: state %q, %v, %d API reads; want the cache's copy", got.Status.State, err, api.Gets)
	}

	// Anyone else's later write: the cache's copy, which includes this controller's write.
	other := &infrav1.RedfishHost{}
	_ = apiServer.Get(ctx, key, other)
	other.Labels = map[string]string{"rack": "7"}
	if err := apiServer.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := read(); err != nil || api.Gets != 2 {
		t.Fatalf("read before the cache has the other write: %v, %d API reads; want the cache's copy (the other write's event comes)", err, api.Gets)
	}
	sync()
	if got, err = read(); err != nil || got.Labels["rack"] != "7" || got.Status.State != infrav1.HostStateProvisioning || api.Gets != 2 {
		t.Fatalf("read after another writer: %v, state %q, %v, %d API reads, want the cache's copy", got.Labels, got.Status.State, err, api.Gets)
	}

	// Versions that are not integers (an API server that does not follow KEP-5504): the API
	// server is asked whenever the cache's copy is not the one last seen.
	odd := &oddVersions{Reader: cache, rv: "x7"}
	h2 := &infrav1.RedfishHost{}
	if err := f.Get(ctx, odd, api, key, h2); err != nil || api.Gets != 3 {
		t.Fatalf("read with an opaque resourceVersion: %v, %d API reads, want 3", err, api.Gets)
	}
}

// An object the cache does not have is asked of the API server only while a version of it is
// known (the last write may have been the one that let it go): found gone there once, it is
// forgotten, and the wakes that follow a deletion (a machine's Node, its host) read nothing. One
// the cache has yet to receive wakes the controller when it does.
func TestAnObjectTheCacheDoesNotHaveIsAskedForOnlyWhileItsVersionIsKnown(t *testing.T) {
	ctx := context.Background()
	scheme, h, key := oneHost(t)
	apiServer := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h).Build()
	empty := fake.NewClientBuilder().WithScheme(scheme).Build() // a cache without the host
	api := &apireads.Counter{Reader: apiServer}
	f := &Reads{Kind: infrav1.GroupVersion.WithKind("RedfishHost")}

	if err := f.Get(ctx, empty, api, key, &infrav1.RedfishHost{}); !apierrors.IsNotFound(err) || api.Gets != 0 {
		t.Fatalf("nothing known, not cached: %v, %d API reads; want NotFound without asking", err, api.Gets)
	}
	// The controller wrote it (its last write, say, removed the finalizer); then it is gone.
	f.remember(key, "5")
	if err := apiServer.Delete(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := f.Get(ctx, empty, api, key, &infrav1.RedfishHost{}); !apierrors.IsNotFound(err) || api.Gets != 1 {
		t.Fatalf("known, not cached: %v, %d API reads; want NotFound from the API server", err, api.Gets)
	}
	if err := f.Get(ctx, empty, api, key, &infrav1.RedfishHost{}); !apierrors.IsNotFound(err) || api.Gets != 1 {
		t.Fatalf("found gone once, woken again: %v, %d API reads; want NotFound without asking again", err, api.Gets)
	}
}

// oneHost is a scheme with the provider's kinds and a host ns/h with its key.
func oneHost(t *testing.T) (*runtime.Scheme, *infrav1.RedfishHost, types.NamespacedName) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}, types.NamespacedName{Namespace: "ns", Name: "h"}
}

// oddVersions reads from a cache whose copies carry rv as their resourceVersion.
type oddVersions struct {
	client.Reader
	rv string
}

func (o *oddVersions) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := o.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	obj.SetResourceVersion(o.rv)
	return nil
}
