// Package maintenanceset reconciles RedfishMaintenanceSets: one maintenance fanned out to the hosts
// a selector picks. Each host gets a RedfishMaintenance owned by the set (named after the set and
// the host); the maintenances are paced by the RedfishMaintenancePolicies like any other. With a
// canary, the canary hosts' maintenances are created first and the others only once those all
// completed and the set's canary is approved. The set counts its hosts by stage; it never changes
// a maintenance it created (retry and abort are done on the maintenance).
package maintenanceset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/names"
	"github.com/caprf/cluster-api-provider-redfish/internal/shutdown"
)

// SetLabel names, on each maintenance a set created, the set.
const SetLabel = "caprf.io/maintenance-set"

// Reasons of the Ready condition of a set.
const (
	CanaryInProgressReason   = "CanaryInProgress"
	CanaryFailedReason       = "CanaryFailed"
	WaitingForApprovalReason = "WaitingForApproval"
	RollingOutReason         = "RollingOut"
	FailedReason             = "MaintenancesFailed"
	CompletedReason          = "Completed"
	InvalidSelectorReason    = "InvalidSelector"
	NoHostsReason            = "NoHosts"
	NoCanaryReason           = "NoCanaryHost"
	NameTakenReason          = "MaintenanceNameTaken"
	// MaxFailuresReason: spec.maxFailures maintenances failed; those not started are paused.
	MaxFailuresReason = "MaxFailuresReached"
)

// Reconciler reconciles RedfishMaintenanceSets.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(_ context.Context, mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&expv1.RedfishMaintenanceSet{}).
		Named("redfishmaintenanceset").
		Owns(&expv1.RedfishMaintenance{}).
		// A host that comes to match a selector gets its maintenance; sets are few per namespace.
		Watches(&infrav1.RedfishHost{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			list := &expv1.RedfishMaintenanceSetList{}
			if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
				return nil
			}
			out := make([]reconcile.Request, 0, len(list.Items))
			for _, s := range list.Items {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
			}
			return out
		})).
		WithOptions(opts).
		Complete(shutdown.Quiet(r))
}

// MaintenanceName is the name of the maintenance a set gives a host: set and host names, cut
// short with a digest when that would be too long (241 characters: the maintenance's reboot
// requests on its host are named maintenance/<name>, at most 253).
func MaintenanceName(set, host string) string { return names.Join(set, host, 241) }

// Reconcile fans the set out and counts its maintenances.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	set := &expv1.RedfishMaintenanceSet{}
	if err := r.Client.Get(ctx, req.NamespacedName, set); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !set.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // its maintenances go with it (owner references)
	}
	helper, err := patch.NewHelper(set, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := helper.Patch(ctx, set, patch.WithOwnedConditions{Conditions: []string{infrav1.ReadyCondition}}); err != nil {
			retErr = err
		}
	}()
	selector, err := metav1.LabelSelectorAsSelector(&set.Spec.HostSelector)
	if err != nil {
		r.notReady(set, InvalidSelectorReason, "spec.hostSelector: %v", err)
		return ctrl.Result{}, nil
	}
	hosts := &infrav1.RedfishHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(set.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return ctrl.Result{}, err
	}
	selected := make([]string, 0, len(hosts.Items))
	for _, h := range hosts.Items {
		if h.DeletionTimestamp.IsZero() {
			selected = append(selected, h.Name)
		}
	}
	slices.Sort(selected)
	owned := &expv1.RedfishMaintenanceList{}
	if err := r.Client.List(ctx, owned, client.InNamespace(set.Namespace), client.MatchingLabels{SetLabel: names.LabelValue(set.Name)}); err != nil {
		return ctrl.Result{}, err
	}
	byHost := map[string]*expv1.RedfishMaintenance{}
	for i := range owned.Items {
		if metav1.IsControlledBy(&owned.Items[i], set) {
			byHost[owned.Items[i].Spec.HostName] = &owned.Items[i]
		}
	}
	if err := r.pickCanary(set, hosts.Items, selected); err != nil {
		r.notReady(set, InvalidSelectorReason, "spec.canary.hostSelector: %v", err)
		return ctrl.Result{}, nil
	}
	if set.Spec.Canary != nil && len(set.Status.CanaryHosts) == 0 && len(selected) > 0 {
		// A canary that picks nothing would let every host go at once.
		r.count(set, selected, byHost)
		r.notReady(set, NoCanaryReason, "spec.canary.hostSelector selects none of the %d host(s): nothing is started", len(selected))
		return ctrl.Result{}, nil
	}

	// The canary's maintenances first; the others once the canary completed and was approved.
	canaryDone, canaryFailed := true, false
	for _, h := range set.Status.CanaryHosts {
		m := byHost[h]
		canaryDone = canaryDone && m != nil && m.Status.Stage == expv1.StageCompleted
		canaryFailed = canaryFailed || (m != nil && (m.Status.Stage == expv1.StageFailed || m.Status.Stage == expv1.StageCancelled))
	}
	rest := set.Spec.Canary == nil || (canaryDone && set.Spec.Canary.Approved)
	var taken []string
	for _, h := range selected {
		if byHost[h] != nil || (!rest && !slices.Contains(set.Status.CanaryHosts, h)) {
			continue
		}
		m, err := r.create(ctx, set, h)
		if errors.Is(err, errNameTaken) {
			taken = append(taken, MaintenanceName(set.Name, h))
			continue
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		byHost[h] = m
	}

	r.count(set, selected, byHost)
	c := &set.Status.Counts
	maxFailures := ptr.Deref(set.Spec.MaxFailures, 1)
	stopped := c.Failed >= maxFailures
	if err := r.stop(ctx, set, byHost, stopped); err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case len(taken) > 0:
		set.Status.Phase = expv1.SetPhaseRollingOut
		r.notReady(set, NameTakenReason, "RedfishMaintenance(s) %s exist and do not belong to this set: their hosts get no maintenance from it (rename or delete them)", strings.Join(taken, ", "))
	case set.Spec.Canary != nil && !rest && canaryFailed:
		set.Status.Phase = expv1.SetPhaseFailed
		r.notReady(set, CanaryFailedReason, "A canary maintenance failed or was cancelled: the other %d host(s) are not started. See the canary maintenances (spec.retry on a failed one), or delete this set", c.NotStarted)
	case set.Spec.Canary != nil && !rest && canaryDone:
		set.Status.Phase = expv1.SetPhaseWaitingForApproval
		r.notReady(set, WaitingForApprovalReason, "The %d canary host(s) completed: set spec.canary.approved to start the other %d", len(set.Status.CanaryHosts), c.NotStarted)
	case set.Spec.Canary != nil && !rest:
		set.Status.Phase = expv1.SetPhaseCanary
		r.notReady(set, CanaryInProgressReason, "%d of %d canary host(s) completed", countDone(set.Status.CanaryHosts, byHost), len(set.Status.CanaryHosts))
	case stopped:
		set.Status.Phase = expv1.SetPhaseFailed
		r.notReady(set, MaxFailuresReason, "%d maintenance(s) failed (spec.maxFailures %d): the %d not started are paused (%s) until a failed one is retried to completion or deleted, or spec.maxFailures is raised; %d in progress go on",
			c.Failed, maxFailures, c.Waiting, clusterv1.PausedAnnotation, c.InProgress)
	case set.Status.Hosts == 0:
		set.Status.Phase = expv1.SetPhaseRollingOut
		r.notReady(set, NoHostsReason, "spec.hostSelector selects no host in namespace %s", set.Namespace)
	case c.Completed == set.Status.Hosts:
		set.Status.Phase = expv1.SetPhaseCompleted
		conditions.Set(set, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: CompletedReason,
			Message: fmt.Sprintf("All %d host(s) completed", c.Completed)})
	case c.Waiting+c.InProgress == 0 && c.Failed+c.Cancelled > 0:
		set.Status.Phase = expv1.SetPhaseFailed
		r.notReady(set, FailedReason, "%d maintenance(s) failed and %d were cancelled; %d completed", c.Failed, c.Cancelled, c.Completed)
	default:
		set.Status.Phase = expv1.SetPhaseRollingOut
		r.notReady(set, RollingOutReason, "%d waiting, %d in progress, %d completed, %d failed of %d host(s)", c.Waiting, c.InProgress, c.Completed, c.Failed, set.Status.Hosts)
	}
	return ctrl.Result{}, nil
}

// pickCanary fixes the canary hosts the first time (later selections do not move them).
func (r *Reconciler) pickCanary(set *expv1.RedfishMaintenanceSet, hosts []infrav1.RedfishHost, selected []string) error {
	cn := set.Spec.Canary
	if cn == nil || len(set.Status.CanaryHosts) > 0 || len(selected) == 0 {
		return nil
	}
	if cn.HostSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(cn.HostSelector)
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if slices.Contains(selected, h.Name) && sel.Matches(labels.Set(h.Labels)) {
				set.Status.CanaryHosts = append(set.Status.CanaryHosts, h.Name)
			}
		}
		slices.Sort(set.Status.CanaryHosts)
		return nil
	}
	n := min(int(ptr.Deref(cn.Count, 1)), len(selected))
	set.Status.CanaryHosts = append([]string(nil), selected[:n]...)
	return nil
}

var errNameTaken = errors.New("the name is taken by a maintenance of another owner")

// create makes the host's maintenance from the template.
func (r *Reconciler) create(ctx context.Context, set *expv1.RedfishMaintenanceSet, host string) (*expv1.RedfishMaintenance, error) {
	t := set.Spec.Template
	m := &expv1.RedfishMaintenance{
		ObjectMeta: metav1.ObjectMeta{Namespace: set.Namespace, Name: MaintenanceName(set.Name, host), Labels: map[string]string{SetLabel: names.LabelValue(set.Name)}},
		Spec: expv1.RedfishMaintenanceSpec{HostName: host, Reason: t.Reason, Requestor: t.Requestor, Policy: t.Policy, Mode: t.Mode,
			Priority: t.Priority, Tasks: t.Tasks, Timeout: t.Timeout},
	}
	if err := controllerutil.SetControllerReference(set, m, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, m); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the maintenance of host %s: %w", host, err)
		}
		// Created by a round whose write the cache has not shown yet, or someone else's.
		existing := &expv1.RedfishMaintenance{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(m), existing); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		if !metav1.IsControlledBy(existing, set) || existing.Spec.HostName != host {
			return nil, errNameTaken
		}
		return existing, nil
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(set, m, "Normal", "MaintenanceCreated", "FanOut", "created maintenance %s of host %s", m.Name, host)
	}
	return m, nil
}

// count fills the counts by stage.
func (r *Reconciler) count(set *expv1.RedfishMaintenanceSet, selected []string, byHost map[string]*expv1.RedfishMaintenance) {
	c := expv1.MaintenanceSetCounts{}
	seen := map[string]bool{}
	for _, h := range selected {
		seen[h] = true
		m := byHost[h]
		if m == nil {
			c.NotStarted++
			continue
		}
		countStage(&c, m)
	}
	// Maintenances of hosts no longer selected still count: they were started.
	for h, m := range byHost {
		if !seen[h] {
			countStage(&c, m)
		}
	}
	set.Status.Counts = c
	set.Status.Hosts = c.NotStarted + c.Waiting + c.InProgress + c.Completed + c.Failed + c.Cancelled
}

// countStage counts a maintenance by its stage; one whose task failed (it stays InMaintenance,
// holding its host, until spec.retry or spec.abort) counts as failed.
func countStage(c *expv1.MaintenanceSetCounts, m *expv1.RedfishMaintenance) {
	if m.Status.Stage == expv1.StageInMaintenance && slices.ContainsFunc(m.Status.Tasks, func(t expv1.MaintenanceTaskStatus) bool { return t.State == expv1.TaskFailed }) {
		c.Failed++
		return
	}
	switch m.Status.Stage {
	case expv1.StageDraining, expv1.StageInMaintenance:
		c.InProgress++
	case expv1.StageCompleted:
		c.Completed++
	case expv1.StageFailed:
		c.Failed++
	case expv1.StageCancelled:
		c.Cancelled++
	default:
		c.Waiting++
	}
}

func countDone(hosts []string, byHost map[string]*expv1.RedfishMaintenance) int {
	n := 0
	for _, h := range hosts {
		if m := byHost[h]; m != nil && m.Status.Stage == expv1.StageCompleted {
			n++
		}
	}
	return n
}

func (r *Reconciler) notReady(set *expv1.RedfishMaintenanceSet, reason, format string, args ...any) {
	conditions.Set(set, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// PausedBySetAnnotation marks a maintenance a set paused on reaching its maxFailures (its value:
// the set's name): the set lifts only the pauses it made.
const PausedBySetAnnotation = "caprf.io/paused-by-set"

// stop pauses the set's maintenances not past the gate yet while the set is stopped, and lifts the
// pauses it made once it is not.
func (r *Reconciler) stop(ctx context.Context, set *expv1.RedfishMaintenanceSet, byHost map[string]*expv1.RedfishMaintenance, stopped bool) error {
	for _, m := range byHost {
		if !metav1.IsControlledBy(m, set) || !m.DeletionTimestamp.IsZero() {
			continue
		}
		ours := m.Annotations[PausedBySetAnnotation] == set.Name
		_, paused := m.Annotations[clusterv1.PausedAnnotation]
		var edit func(*expv1.RedfishMaintenance)
		switch st := m.Status.Stage; {
		case stopped && !ours && !paused && (st == "" || st == expv1.StagePending || st == expv1.StageAnnounced || st == expv1.StageApproved):
			// Paused by a person already: left as it is (and never unpaused by the set).
			edit = func(m *expv1.RedfishMaintenance) {
				if m.Annotations == nil {
					m.Annotations = map[string]string{}
				}
				m.Annotations[PausedBySetAnnotation] = set.Name
				m.Annotations[clusterv1.PausedAnnotation] = ""
			}
		case !stopped && ours:
			edit = func(m *expv1.RedfishMaintenance) {
				delete(m.Annotations, PausedBySetAnnotation)
				delete(m.Annotations, clusterv1.PausedAnnotation)
			}
		default:
			continue
		}
		before := m.DeepCopy()
		edit(m)
		// Locked on the version read: a maintenance that passed the gate since is not paused
		// from a stale stage (the conflict reads it again).
		if err := r.Client.Patch(ctx, m, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
			if apierrors.IsConflict(err) {
				continue
			}
			return fmt.Errorf("pausing maintenance %s: %w", m.Name, err)
		}
	}
	return nil
}
