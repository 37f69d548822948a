package host

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// CredentialsFinalizerPrefix, followed by a host's UID, is the finalizer a RedfishHost puts on the
// Secret it reads its BMC credentials from. A Secret deleted while a host still needs it (with its
// namespace, say, while the host's claim is being released) stays until that host is gone: the
// server is still powered off and erased, which needs the credentials.
const CredentialsFinalizerPrefix = "credentials.redfishhost.infrastructure.cluster.x-k8s.io/"

func credentialsFinalizer(h *infrav1.RedfishHost) string {
	return CredentialsFinalizerPrefix + string(h.UID)
}

// secretMeta reads a Secret's metadata: from the metadata-only watch when there is one (it keeps
// finalizers), else from the API server.
func (r *Reconciler) secretMeta(ctx context.Context, key client.ObjectKey) (*metav1.PartialObjectMetadata, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	reader := r.SecretVersions
	if reader == nil {
		reader = r.APIReader
	}
	return meta, reader.Get(ctx, key, meta)
}

// protectCredentials puts the host's finalizer on its credentials Secret (one read of the
// metadata watch each round; a write only when it is missing), and takes it off the Secrets the
// host named before (spec.bmc.credentialsName changed).
func (r *Reconciler) protectCredentials(ctx context.Context, h *infrav1.RedfishHost) error {
	name := h.Spec.BMC.CredentialsName
	if name == "" || h.UID == "" {
		return nil
	}
	fin := credentialsFinalizer(h)
	meta, err := r.secretMeta(ctx, client.ObjectKey{Namespace: h.Namespace, Name: name})
	if apierrors.IsNotFound(err) {
		return nil // said by the BMCReachable condition
	}
	if err != nil || slices.Contains(meta.Finalizers, fin) || !meta.DeletionTimestamp.IsZero() {
		return err // (a Secret being deleted takes no new finalizer)
	}
	// Only a Secret labelled as BMC credentials takes the finalizer: it marks a Secret this host
	// may send to its BMC (see target), and must not pin, or vouch for, any other Secret.
	if sec, err := r.secrets().getSecret(ctx, client.ObjectKey{Namespace: h.Namespace, Name: name}); err != nil || sec.labels[infrav1.BMCCredentialsLabel] != "true" {
		return client.IgnoreNotFound(err)
	}
	base := meta.DeepCopy()
	controllerutil.AddFinalizer(meta, fin)
	// A finalizer of a host that no longer exists (copied by clusterctl move with the Secret, or
	// left by a host whose own finalizer was dropped by hand) goes with the same write. A host
	// the cache has not seen yet puts its finalizer back in its next round.
	hosts := &infrav1.RedfishHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(h.Namespace)); err != nil {
		return err
	}
	live := map[string]bool{}
	for i := range hosts.Items {
		live[CredentialsFinalizerPrefix+string(hosts.Items[i].UID)] = true
	}
	meta.Finalizers = slices.DeleteFunc(meta.Finalizers, func(f string) bool {
		return strings.HasPrefix(f, CredentialsFinalizerPrefix) && f != fin && !live[f]
	})
	if err := r.Client.Patch(ctx, meta, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // the next round, on the newer version
		}
		return fmt.Errorf("protecting credentials Secret %s: %w", name, err)
	}
	return r.releaseCredentials(ctx, h, name)
}

// releaseCredentials takes the host's finalizer off every Secret of its namespace but keep: at
// the host's deletion (keep empty), or off the Secrets it no longer names. The Secrets are listed
// from the API server: a cache behind the finalizer's write would leave it behind.
func (r *Reconciler) releaseCredentials(ctx context.Context, h *infrav1.RedfishHost, keep string) error {
	if h.UID == "" {
		return nil
	}
	fin := credentialsFinalizer(h)
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := r.APIReader.List(ctx, list, client.InNamespace(h.Namespace)); err != nil {
		return fmt.Errorf("listing Secrets for the host's credentials finalizer: %w", err)
	}
	for i := range list.Items {
		meta := &list.Items[i]
		if meta.Name == keep || !slices.Contains(meta.Finalizers, fin) {
			continue
		}
		base := meta.DeepCopy()
		controllerutil.RemoveFinalizer(meta, fin)
		if err := r.Client.Patch(ctx, meta, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing credentials Secret %s: %w", meta.Name, err)
		}
	}
	return nil
}
