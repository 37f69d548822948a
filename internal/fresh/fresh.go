// Package fresh lets a controller read its objects from the cache without acting on a copy older
// than its own last write. A controller that acts on hardware (a BMC) from what an object's
// status records must not read a copy a write behind: it would repeat the action that write
// recorded. Reading every object from the API server is safe but costs a request per reconcile.
// Reads remembers, per object, the resourceVersion of the newest copy the controller wrote or read
// from the API server. The cache's copy is used when it carries that version or a newer one (a
// later write, anyone else's, includes this controller's). A copy older than that version is not
// read again from the API server: the round ends (ErrStale), and the watch event that brings the
// version into the cache wakes the object again (an informer delivers every object's latest
// version, after a relist too); the caller also requeues, and a cache still behind after
// Patience (a watch down, or an etcd restored to older versions) is passed by with an API read.
// Resource versions are compared as KEP-5504 lets clients compare them; where they are not
// comparable integers, the API server is asked.
package fresh

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Patience is how long Get waits (answers ErrStale) for a cache behind the last version seen
// before it reads the object from the API server instead.
const Patience = 10 * time.Second

// Reads tracks the objects of one kind.
type Reads struct {
	Kind schema.GroupVersionKind
	seen sync.Map // types.NamespacedName -> version
	// now is the clock (tests move it); default time.Now.
	now func() time.Time
}

// version is the newest resourceVersion of an object the controller wrote or read from the API
// server, and when it learnt it.
type version struct {
	rv string
	at time.Time
}

func (f *Reads) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

func (f *Reads) remember(key types.NamespacedName, rv string) {
	f.seen.Store(key, version{rv: rv, at: f.clock()})
}

// Client wraps c so that every write of the kind through it is remembered. CAPI's patch helper
// and internal/onepatch write a copy of the object, so the version cannot be read back from the object held.
func (f *Reads) Client(c client.Client) client.Client { return recording{Client: c, f: f} }

// ErrStale is Get's answer when the cache's copy is older than the last one this controller wrote
// or read (for less than Patience): the caller ends its round and requeues; the cache's catching
// up wakes the object sooner.
var ErrStale = errors.New("the cache has not caught up with this controller's last write yet")

// Get reads key into obj: from cache when its copy is the one last written or read, or newer;
// ErrStale when it is older (from api once it has been for Patience); from api when the cache has
// a copy but nothing is known of the object, or the versions do not compare. An object the cache
// does not have is read from api only when a version of it is known (the controller's last write
// may have been the one that let it go); otherwise it is NotFound: one the cache has yet to
// receive wakes the controller when it does, and an object gone is not asked for again at every
// wake (its Node's deletion, its host's release) after it was found gone once. The controller's
// writes must all go through Client, and every change of the object must wake it (no predicate on
// its watch).
func (f *Reads) Get(ctx context.Context, cache client.Reader, api client.Reader, key types.NamespacedName, obj client.Object) error {
	err := cache.Get(ctx, key, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	v, known := f.seen.Load(key)
	if err != nil && !known {
		return err
	}
	if err == nil && known {
		seen := v.(version)
		switch c, cerr := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), seen.rv); {
		case cerr != nil: // not comparable: ask the API server
		case c == 0:
			return nil
		case c > 0:
			f.remember(key, obj.GetResourceVersion())
			return nil
		case f.clock().Sub(seen.at) < Patience:
			return ErrStale
		}
	}
	if err := api.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			f.seen.Delete(key)
		}
		return err
	}
	f.remember(key, obj.GetResourceVersion())
	return nil
}

// Forget drops what is remembered of an object that is gone.
func (f *Reads) Forget(key types.NamespacedName) { f.seen.Delete(key) }

type recording struct {
	client.Client
	f *Reads
}

// note remembers the version a write returned. A failed write may still have been applied (a
// timeout): what was remembered is forgotten, and the next read goes to the API server.
func (c recording) note(obj client.Object, err error) {
	if gvk, gerr := c.GroupVersionKindFor(obj); gerr != nil || gvk != c.f.Kind {
		return
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if err != nil {
		c.f.seen.Delete(key)
		return
	}
	c.f.remember(key, obj.GetResourceVersion())
}

func (c recording) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := c.Client.Update(ctx, obj, opts...)
	c.note(obj, err)
	return err
}

func (c recording) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	err := c.Client.Patch(ctx, obj, p, opts...)
	c.note(obj, err)
	return err
}

func (c recording) Status() client.SubResourceWriter {
	return recordingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type recordingStatus struct {
	client.SubResourceWriter
	c recording
}

func (s recordingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	err := s.SubResourceWriter.Update(ctx, obj, opts...)
	s.c.note(obj, err)
	return err
}

func (s recordingStatus) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.SubResourceWriter.Patch(ctx, obj, p, opts...)
	s.c.note(obj, err)
	return err
}
