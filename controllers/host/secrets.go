package host

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretReader reads the Secrets hosts name (BMC credentials, CA bundles) without a request to
// the API server on every reconcile: it keeps what it read with the Secret's resourceVersion,
// and reads the Secret again only when a metadata-only watch of Secrets (versions, no data)
// shows another version, or none. Secrets are never cached whole by the manager.
type secretReader struct {
	api client.Reader // the API server
	// versions reads Secrets' metadata from a watch; nil: every read goes to the API server.
	versions client.Reader

	mu   sync.Mutex
	read map[types.NamespacedName]readSecret
}

type readSecret struct {
	version    string
	data       map[string][]byte
	labels     map[string]string
	finalizers []string
}

// get returns the data of the Secret key names, as of its current version.
func (s *secretReader) get(ctx context.Context, key types.NamespacedName) (map[string][]byte, error) {
	r, err := s.getSecret(ctx, key)
	return r.data, err
}

// getSecret returns the data and labels of the Secret key names, as of its current version (a
// label change is a new version).
func (s *secretReader) getSecret(ctx context.Context, key types.NamespacedName) (readSecret, error) {
	if s.versions != nil {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		err := s.versions.Get(ctx, key, meta)
		switch {
		case err == nil:
			s.mu.Lock()
			r, ok := s.read[key]
			s.mu.Unlock()
			if ok && r.version == meta.ResourceVersion {
				return r, nil
			}
		case apierrors.IsNotFound(err):
			s.forget(key) // no credentials kept for a Secret that is gone
		}
	}
	sec := &corev1.Secret{}
	if err := s.api.Get(ctx, key, sec); err != nil {
		s.forget(key)
		return readSecret{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read == nil {
		s.read = map[types.NamespacedName]readSecret{}
	}
	r := readSecret{version: sec.ResourceVersion, data: sec.Data, labels: sec.Labels, finalizers: sec.Finalizers}
	s.read[key] = r
	return r, nil
}

func (s *secretReader) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.read, key)
}

// StripToVersion is the transform of a metadata-only Secret cache: it keeps what secretReader
// compares (name, namespace, resourceVersion) and drops the rest (kubectl's last-applied
// annotation can carry a Secret's data).
func StripToVersion(in any) (any, error) {
	if o, ok := in.(metav1.Object); ok {
		o.SetManagedFields(nil)
		o.SetAnnotations(nil)
		o.SetLabels(nil)
		o.SetOwnerReferences(nil)
	}
	return in, nil
}
