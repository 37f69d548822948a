package fresh

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// countingReader counts the reads that reach the API server.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// An object is read from the cache only when the cache holds the version this controller last
// wrote or read: a cache a write behind (which would repeat the action the last round recorded),
// or holding anyone else's write, sends the read to the API server.
func TestAnObjectIsReadFromTheCacheOnlyWhenItHasTheLastWrite(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}
	key := types.NamespacedName{Namespace: "ns", Name: "h"}
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
	api := &countingReader{Reader: apiServer}
	f := &Reads{Kind: infrav1.GroupVersion.WithKind("RedfishHost")}
	read := func() (*infrav1.RedfishHost, error) {
		h := &infrav1.RedfishHost{}
		return h, f.Get(ctx, cache, api, key, h)
	}

	if _, err := read(); err != nil || api.gets != 1 {
		t.Fatalf("first read: %v, %d API reads, want 1 (nothing known yet)", err, api.gets)
	}
	if _, err := read(); err != nil || api.gets != 1 {
		t.Fatalf("second read of an unchanged host: %v, %d API reads, want still 1", err, api.gets)
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
	got, err := read()
	if err != nil || got.Status.State != infrav1.HostStateProvisioning || api.gets != 2 {
		t.Fatalf("read after a write the cache lacks: state %q, %v, %d API reads; want the written state from the API server", got.Status.State, err, api.gets)
	}
	sync()
	got, err = read()
	if err != nil || got.Status.State != infrav1.HostStateProvisioning || api.gets != 2 {
		t.Fatalf("read once the cache has the write: state %q, %v, %d API reads; want the cache's copy", got.Status.State, err, api.gets)
	}

	// Anyone else's write: read from the API server once.
	other := &infrav1.RedfishHost{}
	_ = apiServer.Get(ctx, key, other)
	other.Labels = map[string]string{"rack": "7"}
	if err := apiServer.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	sync()
	if got, err = read(); err != nil || got.Labels["rack"] != "7" || api.gets != 3 {
		t.Fatalf("read after another writer: %v, %v, %d API reads, want 3", got.Labels, err, api.gets)
	}
}
