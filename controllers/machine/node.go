package machine

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/index"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

// nodeRecheck is how often a machine waiting for its Node looks again. Only a safety net: the
// Node joining wakes the machine through the workload cluster's Node watch.
const nodeRecheck = 30 * time.Second

// waitForNode waits for the Node with the machine's providerID to join the workload cluster,
// then reports the machine provisioned with the Node's addresses and tells the host its claim is
// provisioned, which ends the seed server's serving of the seed; a disk image's seed is deleted.
func (r *Reconciler) waitForNode(ctx context.Context, s *scope) (ctrl.Result, error) {
	rm := s.rm
	if p := rm.Status.Initialization.Provisioned; p != nil && *p && s.host.Status.Claim.Provisioned {
		conditions.Set(rm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason})
		return ctrl.Result{}, nil
	}
	remote, err := r.ClusterCache.GetClient(ctx, client.ObjectKeyFromObject(s.cluster))
	if err != nil {
		setNotReady(rm, infrav1.ProvisioningReason, "Waiting for the connection to the workload cluster")
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	recheck := nodeRecheck // the Node's arrival (watched) wakes the machine
	if err := r.watchNodes(ctx, s.cluster); err != nil {
		// Not watched: the machine looks for its Node every PollInterval instead.
		ctrl.LoggerFrom(ctx).Info("cannot watch the workload cluster's Nodes; polling for the Node", "error", err.Error())
		recheck = r.PollInterval
	}
	nodes := &corev1.NodeList{}
	if err := remote.List(ctx, nodes, client.MatchingFields{index.NodeProviderIDField: rm.Spec.ProviderID}); err != nil {
		return ctrl.Result{}, err
	}
	// A Node has joined once its kubelet posted status (addresses); a bare Node object is not enough.
	if len(nodes.Items) == 0 || len(nodes.Items[0].Status.Addresses) == 0 {
		msg := "Waiting for the Node of host " + s.host.Name + " to join"
		if c := conditions.Get(s.host, infrav1.BootPreparedCondition); c != nil && c.Status == metav1.ConditionFalse {
			msg = "Host " + s.host.Name + " cannot boot: " + c.Message // e.g. a single virtual media device
		}
		setNotReady(rm, infrav1.ProvisioningReason, msg)
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	node := nodes.Items[0]
	rm.Status.Addresses = nil
	for _, a := range node.Status.Addresses {
		rm.Status.Addresses = append(rm.Status.Addresses, clusterv1.MachineAddress{Type: clusterv1.MachineAddressType(a.Type), Address: a.Address})
	}
	yes := true
	rm.Status.Initialization.Provisioned = &yes

	if !s.host.Status.Claim.Provisioned {
		h := s.host.DeepCopy()
		h.Status.Claim.Provisioned = true
		if err := r.Client.Status().Update(ctx, h); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: r.PollInterval / 4}, nil
			}
			return ctrl.Result{}, err
		}
		*s.host = *h
	}
	// The seed goes once the Node joined, unless the image is live: a live OS keeps nothing across
	// a power-off, and boots with its seed again on every power-on the provider sends (the seed
	// server serves it only then; it goes with the machine). A seed written before seeds named
	// their host goes too: the seed server could not tell when to serve it.
	keep, err := r.liveSeed(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !keep {
		if err := r.deleteSeed(ctx, rm); err != nil {
			return ctrl.Result{}, err
		}
	}
	conditions.Set(rm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason})
	return ctrl.Result{}, nil
}

// liveSeed says whether the machine's seed is kept past the join: a live image's, naming its host.
func (r *Reconciler) liveSeed(ctx context.Context, s *scope) (bool, error) {
	if s.host.Status.Claim.Image.EffectiveFormat().InstallsToDisk() {
		return false, nil
	}
	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.rm.Namespace, Name: seed.SecretName(s.rm.Name)}, sec); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return len(sec.Data[seed.KeyHost]) > 0, nil
}
