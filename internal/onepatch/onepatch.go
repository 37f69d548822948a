// Package onepatch writes what a reconcile round changed in an object: the metadata and spec in
// one merge patch, the whole status, conditions included, in one status merge patch. Unlocked, it
// is for an object whose conditions only its own controller sets (Owning names them: a condition
// of another type in the copy read sends the round to CAPI's patch helper, which keeps it); Locked,
// for one whose conditions another controller sets too, where a refused write goes to CAPI's
// patch helper.
//
// CAPI's patch helper writes the conditions in a patch of their own (locked on the
// resourceVersion, read again and merged on a conflict), so that several controllers can share
// an object's conditions, and the rest of the status in a second patch. Where one controller
// owns every condition (a RedfishHost's are the host controller's alone), that second write per
// state change costs the API server a status update, and every watcher an event, for nothing,
// and a reader between the two writes saw the conditions of one state with the status of the
// one before. Like the helper's status patch, the status patch here, unless Locked, carries
// the fields the round changed (status.conditions whole, as a JSON merge patch replaces a list),
// so a field someone else wrote meanwhile is kept unless this round changed it too.
package onepatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Helper remembers an object as read, to write what changed in it.
type Helper struct {
	c      client.Client
	before client.Object
	rv     string        // the resourceVersion the writes are locked on ("": not locked)
	owned  []string      // the condition types the caller sets (nil: not said)
	api    client.Reader // where CAPI's patch helper reads (Owning)
}

// New remembers obj as it is now.
func New(obj client.Object, c client.Client) *Helper {
	return &Helper{c: c, before: obj.DeepCopyObject().(client.Object)}
}

// Locked makes Patch's writes carry resourceVersion rv, the newest version of the object the
// caller knows it wrote or read: where anyone else wrote the object since, they fail with a
// Conflict. For an object whose conditions another controller sets too, where the caller then
// writes with CAPI's patch helper, which merges them. Locked("") leaves the writes unlocked.
func (h *Helper) Locked(rv string) *Helper {
	h.rv = rv
	return h
}

// Owning names the condition types the caller's controller sets. Where the copy given to New
// holds a condition of another type (another controller, or someone with kubectl, set it: the
// one status patch carries status.conditions whole, and would overwrite it with that copy's),
// Patch writes through CAPI's patch helper instead: it reads the object through api (the API
// server: a cache behind the round's own earlier write would make its locked conditions patch
// conflict until it gives up), patches the conditions the round changed onto that copy (locked,
// read again and merged on a conflict), then the metadata and spec, then the rest of the status:
// that condition is kept whatever was written since the round's read, at the cost of a read and
// up to three writes instead of two. (A foreign condition first written after the read is not seen, and that
// round's write drops it: a controller that watches the object sets it again, and from then on
// it is seen; one set by hand is lost.)
func (h *Helper) Owning(api client.Reader, types ...string) *Helper {
	h.owned, h.api = types, api
	return h
}

// readsFrom is a client whose reads go to r.
type readsFrom struct {
	client.Client
	r client.Reader
}

func (c readsFrom) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.r.Get(ctx, key, obj, opts...)
}

// foreign tells whether the copy read holds a condition whose type the caller does not own.
func (h *Helper) foreign() bool {
	if h.owned == nil {
		return false
	}
	g, ok := h.before.(conditions.Getter)
	if !ok {
		return false
	}
	for _, c := range g.GetConditions() {
		if !slices.Contains(h.owned, c.Type) {
			return true
		}
	}
	return false
}

// Patch writes what changed in obj since New: at most one patch of its metadata and spec, then
// one of its status (through CAPI's patch helper, in its order, where the copy read holds a
// condition the caller does not own: see Owning). obj itself is left as it is (the writes are made with copies), as with CAPI's
// patch helper. A status the API server no longer has because the object is gone (deleting, its
// last finalizer removed by the first patch) is not an error.
func (h *Helper) Patch(ctx context.Context, obj client.Object) error {
	if h.rv == "" && h.foreign() {
		c := h.c
		if h.api != nil {
			c = readsFrom{Client: h.c, r: h.api}
		}
		helper, err := patch.NewHelper(h.before, c)
		if err != nil {
			return fmt.Errorf("patching %s: %w", client.ObjectKeyFromObject(obj), err)
		}
		return helper.Patch(ctx, obj, patch.WithOwnedConditions{Conditions: h.owned})
	}
	data, err := client.MergeFrom(h.before).Data(obj)
	if err != nil {
		return fmt.Errorf("computing the patch of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	diff := map[string]json.RawMessage{}
	if err := json.Unmarshal(data, &diff); err != nil {
		return fmt.Errorf("computing the patch of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	status, statusChanged := diff["status"]
	delete(diff, "status")
	var errs []error
	rv, conflict := h.rv, false
	if len(diff) > 0 {
		written := obj.DeepCopyObject().(client.Object)
		body, err := body(diff, rv)
		if err == nil {
			err = h.c.Patch(ctx, written, client.RawPatch(types.MergePatchType, body))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("patching the metadata and spec of %s: %w", client.ObjectKeyFromObject(obj), err))
			conflict = apierrors.IsConflict(err)
		} else if rv != "" {
			rv = written.GetResourceVersion() // this write's own
		}
	}
	// The status is written even where the metadata and spec could not be (a webhook down), but
	// not on a lock that already failed.
	if statusChanged && (rv == "" || !conflict) {
		body, err := body(map[string]json.RawMessage{"status": status}, rv)
		if err == nil {
			err = h.c.Status().Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, body))
		}
		gone := apierrors.IsNotFound(err) && !obj.GetDeletionTimestamp().IsZero() && len(obj.GetFinalizers()) == 0
		if err != nil && !gone {
			errs = append(errs, fmt.Errorf("patching the status of %s: %w", client.ObjectKeyFromObject(obj), err))
		}
	}
	return errors.Join(errs...)
}

// body is the merge patch of the given top-level fields, locked on rv unless it is "".
func body(fields map[string]json.RawMessage, rv string) ([]byte, error) {
	if rv == "" {
		return json.Marshal(fields)
	}
	meta := map[string]json.RawMessage{}
	if m, ok := fields["metadata"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, err
		}
	}
	v, err := json.Marshal(rv)
	if err != nil {
		return nil, err
	}
	meta["resourceVersion"] = v
	locked := map[string]any{}
	for k, f := range fields {
		locked[k] = f
	}
	locked["metadata"] = meta
	return json.Marshal(locked)
}
