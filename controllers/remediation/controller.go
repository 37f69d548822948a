// Package remediation reconciles RedfishRemediations: reboot-based external remediation for
// MachineHealthChecks (spec.remediation.templateRef). The host is fenced (power confirmed off)
// through a typed reboot request on the RedfishHost, then powered on again; the host controller
// is the only one touching the BMC. Phases move forward only: Fencing → PoweringOn → Completed.
package remediation

import (
	"context"
	"errors"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// Finalizer makes sure a deleted remediation never leaves its host held off.
const Finalizer = "redfishremediation.infrastructure.cluster.x-k8s.io"

// Reconciler reconciles RedfishRemediations.
type Reconciler struct {
	Client       client.Client
	PollInterval time.Duration
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(_ context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.PollInterval == 0 {
		r.PollInterval = 2 * time.Second
	}
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.RedfishRemediation{}).Named("redfishremediation").WithOptions(opts).Complete(r)
}

func requestor(rr *infrav1.RedfishRemediation) string { return "remediation/" + rr.Name }

// Reconcile advances one remediation.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	rr := &infrav1.RedfishRemediation{}
	if err := r.Client.Get(ctx, req.NamespacedName, rr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	helper, err := patch.NewHelper(rr, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := helper.Patch(ctx, rr); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()

	host, err := r.hostOf(ctx, rr)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !rr.DeletionTimestamp.IsZero() {
		if host != nil {
			if err := r.setRequest(ctx, host, rr, false); err != nil {
				return ctrl.Result{}, err
			}
		}
		controllerutil.RemoveFinalizer(rr, Finalizer)
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(rr, Finalizer) {
		return ctrl.Result{}, nil
	}
	if host == nil {
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil // the machine has no host (yet): nothing to reboot
	}
	rr.Status.Host = host.Name
	now := metav1.Now()
	switch rr.Status.Phase {
	case "", infrav1.RemediationFencing:
		rr.Status.Phase = infrav1.RemediationFencing
		if err := r.setRequest(ctx, host, rr, true); err != nil {
			return ctrl.Result{}, err
		}
		if host.Status.PowerState != "Off" {
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		rr.Status.FencedAt, rr.Status.Phase = &now, infrav1.RemediationPoweringOn
		fallthrough
	case infrav1.RemediationPoweringOn:
		if err := r.setRequest(ctx, host, rr, false); err != nil {
			return ctrl.Result{}, err
		}
		if host.Status.PowerState != "On" {
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		rr.Status.CompletedAt, rr.Status.Phase = &now, infrav1.RemediationCompleted
	}
	return ctrl.Result{}, nil
}

// hostOf finds the host of the Machine the remediation is named after (as the MachineHealthCheck
// names it).
func (r *Reconciler) hostOf(ctx context.Context, rr *infrav1.RedfishRemediation) (*infrav1.RedfishHost, error) {
	m := &clusterv1.Machine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: rr.Name}, m); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	rm := &infrav1.RedfishMachine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: m.Spec.InfrastructureRef.Name}, rm); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if rm.Status.HostRef == "" {
		return nil, nil
	}
	h := &infrav1.RedfishHost{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: rm.Status.HostRef}, h); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return h, nil
}

// setRequest adds or removes this remediation's reboot request on the host.
func (r *Reconciler) setRequest(ctx context.Context, h *infrav1.RedfishHost, rr *infrav1.RedfishRemediation, want bool) error {
	idx := slices.IndexFunc(h.Spec.RebootRequests, func(q infrav1.RebootRequest) bool { return q.Requestor == requestor(rr) })
	if (idx >= 0) == want {
		return nil
	}
	before := h.DeepCopy()
	if want {
		mode := rr.Spec.Mode
		if mode == "" {
			mode = infrav1.RebootModeHard
		}
		h.Spec.RebootRequests = append(h.Spec.RebootRequests, infrav1.RebootRequest{Requestor: requestor(rr), Mode: mode})
	} else {
		h.Spec.RebootRequests = slices.Delete(h.Spec.RebootRequests, idx, idx+1)
	}
	err := r.Client.Patch(ctx, h, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		return nil // re-read next round
	}
	return err
}
