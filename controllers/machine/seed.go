package machine

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

// ensureSeed sets the providerID and writes the seed Secret the host boots with (a fresh token,
// owned by the RedfishMachine). Once the Node of an image installed to disk joined, the Secret is
// gone for good; a live image's stays until the machine is deleted (it is booted on every power-on).
func (r *Reconciler) ensureSeed(ctx context.Context, s *scope) (ctrl.Result, error) {
	rm := s.rm
	if s.host == nil || s.host.Status.Claim == nil {
		return ctrl.Result{}, nil // no host of this machine's (a claim lost): nothing to boot
	}
	if rm.Spec.ProviderID == "" {
		rm.Spec.ProviderID = claim.ProviderID(rm.Namespace, s.host.Name, rm.Name)
	}
	if s.host.Status.Claim.Provisioned {
		return ctrl.Result{}, nil
	}
	key := client.ObjectKey{Namespace: rm.Namespace, Name: seed.SecretName(rm.Name)}
	if r.SecretVersions != nil {
		// Written already (the usual case on every round until the Node joins): no request.
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if err := r.SecretVersions.Get(ctx, key, meta); err == nil {
			return ctrl.Result{}, nil
		}
	}
	existing := &corev1.Secret{}
	err := r.APIReader.Get(ctx, key, existing)
	if err == nil {
		return ctrl.Result{}, nil
	}
	if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	token, err := seed.NewToken()
	if err != nil {
		return ctrl.Result{}, err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{
			clusterv1.ClusterNameLabel: s.cluster.Name,
		}},
		Type: seed.SecretType,
		Data: map[string][]byte{
			seed.KeyToken:           []byte(token),
			seed.KeyBootstrapSecret: []byte(*s.machine.Spec.Bootstrap.DataSecretName),
			seed.KeyProviderID:      []byte(rm.Spec.ProviderID),
			seed.KeyHostname:        []byte(s.machine.Name),
			seed.KeyInstanceID:      []byte(s.machine.UID),
			seed.KeyImageURL:        []byte(rm.Spec.Image.URL),
			seed.KeyBootMAC:         []byte(s.host.Spec.BootMACAddress),
			seed.KeyHost:            []byte(s.host.Name),
		},
	}
	if img := rm.Spec.Image; img.EffectiveFormat().InstallsToDisk() {
		// What the deploy script installs, and where: the seed server writes the script from it
		// (and names the root drive in the meta-data, for a self-installing ISO).
		sec.Data[seed.KeyImageFormat] = []byte(img.EffectiveFormat())
		sec.Data[seed.KeyChecksum] = []byte(img.Checksum)
		sec.Data[seed.KeyChecksumType] = []byte(img.ChecksumType)
		sec.Data[seed.KeyImageCABundle] = []byte(img.CABundleName)
		if rd := s.host.Status.Claim.RootDevice; rd != nil {
			sec.Data[seed.KeyRootSerial] = []byte(rd.SerialNumber)
			sec.Data[seed.KeyRootWWN] = []byte(rd.WWN)
		}
	}
	if err := controllerutil.SetControllerReference(rm, sec, r.Client.Scheme()); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Client.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, err
	}
	setNotReady(rm, infrav1.ProvisioningReason, "Booting host "+s.host.Name)
	return ctrl.Result{}, nil
}

// deleteSeed removes the seed: the bootstrap data is no longer served.
func (r *Reconciler) deleteSeed(ctx context.Context, rm *infrav1.RedfishMachine) error {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: rm.Namespace, Name: seed.SecretName(rm.Name)}}
	if r.SecretVersions != nil {
		// Gone already (every round after the first): no request. A seed written moments ago
		// that the watch has not seen yet goes with its RedfishMachine (it owns the seed).
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if err := r.SecretVersions.Get(ctx, client.ObjectKeyFromObject(sec), meta); apierrors.IsNotFound(err) {
			return nil
		}
	}
	return client.IgnoreNotFound(r.Client.Delete(ctx, sec))
}
