// Package onepatch writes what a reconcile round changed in an object whose conditions only its
// own controller sets: the metadata and spec in one merge patch, the whole status, conditions
// included, in one status merge patch.
//
// CAPI's patch helper writes the conditions in a patch of their own (locked on the
// resourceVersion, read again and merged on a conflict), so that several controllers can share
// an object's conditions, and the rest of the status in a second patch. Where one controller
// owns every condition (a RedfishHost's are the host controller's alone), that second write per
// state change costs the API server a status update, and every watcher an event, for nothing,
// and a reader between the two writes saw the conditions of one state with the status of the
// one before. Like the helper's status patch, the status patch here is not locked: it carries
// the fields the round changed (status.conditions whole, as a JSON merge patch replaces a list),
// so a field someone else wrote meanwhile is kept unless this round changed it too.
package onepatch

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Helper remembers an object as read, to write what changed in it.
type Helper struct {
	c      client.Client
	before client.Object
}

// New remembers obj as it is now.
func New(obj client.Object, c client.Client) *Helper {
	return &Helper{c: c, before: obj.DeepCopyObject().(client.Object)}
}

// Patch writes what changed in obj since New: at most one patch of its metadata and spec, then
// one of its status. obj itself is left as it is (the writes are made with copies), as with CAPI's
// patch helper. A status the API server no longer has because the object is gone (deleting, its
// last finalizer removed by the first patch) is not an error.
func (h *Helper) Patch(ctx context.Context, obj client.Object) error {
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
	if len(diff) > 0 {
		body, err := json.Marshal(diff)
		if err == nil {
			err = h.c.Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, body))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("patching the metadata and spec of %s: %w", client.ObjectKeyFromObject(obj), err))
		}
	}
	if statusChanged {
		body, err := json.Marshal(map[string]json.RawMessage{"status": status})
		if err == nil {
			err = h.c.Status().Patch(ctx, obj.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, body))
		}
		gone := apierrors.IsNotFound(err) && !obj.GetDeletionTimestamp().IsZero() && len(obj.GetFinalizers()) == 0
		if err != nil && !gone {
			errs = append(errs, fmt.Errorf("patching the status of %s: %w", client.ObjectKeyFromObject(obj), err))
		}
	}
	return kerrors.NewAggregate(errs)
}
