package machine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
	"github.com/caprf/cluster-api-provider-redfish/internal/install"
	"github.com/caprf/cluster-api-provider-redfish/internal/metrics"
)

// claimHost makes sure the machine holds exactly one host. A claim is written to the host's
// status with an Update carrying the resourceVersion read, so of two machines racing for one host
// the API server lets exactly one win; the loser tries another host.
func (r *Reconciler) claimHost(ctx context.Context, s *scope) (ctrl.Result, error) {
	rm := s.rm
	held := func(h *infrav1.RedfishHost) (ctrl.Result, error) {
		s.host = h
		rm.Status.HostRef = h.Name
		conditions.Set(rm, metav1.Condition{Type: infrav1.HostClaimedCondition, Status: metav1.ConditionTrue, Reason: "Claimed", Message: "Host " + h.Name})
		return ctrl.Result{}, nil
	}
	// The host the machine recorded, read alone: a machine that holds its host (every round of
	// its life after the claim) lists no hosts.
	if rm.Status.HostRef != "" {
		h := &infrav1.RedfishHost{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: rm.Namespace, Name: rm.Status.HostRef}, h)
		if err == nil && claimedBy(h, rm) {
			r.claimsSent.Delete(rm.UID) // the cache has the claim
			return held(h)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	// Only read (the host claimed is copied before its claim is written): listed from the cache
	// without copies, which at N = 1000 were half the manager's CPU while provisioning.
	hosts := &infrav1.RedfishHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(rm.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	for i := range hosts.Items {
		if h := &hosts.Items[i]; claimedBy(h, rm) {
			r.claimsSent.Delete(rm.UID)
			return held(h.DeepCopy())
		}
	}
	if name, ok := r.claimsSent.Load(rm.UID); ok {
		// A claim this process wrote that the cache does not show (yet): the API server says
		// whether it landed. Until it answers, no other host is claimed.
		h := &infrav1.RedfishHost{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rm.Namespace, Name: name.(string)}, h)
		switch {
		case err == nil && claimedBy(h, rm):
			return held(h)
		case err != nil && !apierrors.IsNotFound(err):
			return ctrl.Result{}, fmt.Errorf("reading host %s, whose claim's answer was lost: %w", name, err)
		}
		r.claimsSent.Delete(rm.UID) // it did not land: the machine holds no host
	}
	if rm.Status.HostRef != "" {
		// We had a host and no longer hold it: never silently take another one.
		conditions.Set(rm, metav1.Condition{Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse, Reason: "ClaimLost",
			Message: fmt.Sprintf("Host %s is no longer claimed by this machine", rm.Status.HostRef)})
		setNotReady(rm, "ClaimLost", "The claimed host was lost")
		// Stop the round here (the next phases need a host) and look again later: a restored
		// host may hand the claim back.
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	if host := claim.HostOf(rm.Spec.ProviderID, rm.Namespace); host != "" {
		return r.reclaim(s, hosts.Items, host)
	}

	owner := claim.Owner(s.machine, s.cluster)
	fdLabel := r.failureDomainLabel(ctx, s.cluster)
	candidates, waitingFor, err := r.candidates(ctx, s, hosts.Items, owner, fdLabel)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, c := range candidates {
		h, err := r.tryClaim(ctx, s, c, owner)
		if err != nil {
			return ctrl.Result{}, err
		}
		if h != nil {
			s.host = h
			rm.Status.HostRef = h.Name
			if fd := h.Labels[fdLabel]; fd != "" {
				rm.Status.FailureDomain = fd
			}
			conditions.Set(rm, metav1.Condition{Type: infrav1.HostClaimedCondition, Status: metav1.ConditionTrue, Reason: "Claimed", Message: "Host " + h.Name})
			if r.Recorder != nil {
				r.Recorder.Eventf(rm, h, corev1.EventTypeNormal, "HostClaimed", "Claim", "claimed host %s", h.Name)
			}
			return ctrl.Result{}, nil
		}
	}
	msg := "No available host in namespace " + rm.Namespace + " matches the selector and failure domain"
	if waitingFor != "" {
		msg = waitingFor
	} else if n := r.availableElsewhere(ctx, rm); n > 0 {
		msg += fmt.Sprintf("; %d Available hosts matching the selector exist in other namespaces, but a Machine only claims hosts of its own namespace", n)
	}
	conditions.Set(rm, metav1.Condition{Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse, Reason: infrav1.WaitingForHostReason, Message: msg})
	setNotReady(rm, infrav1.WaitingForHostReason, msg)
	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

// reclaim waits for the host this machine ran on, named by its providerID, to restore the claim:
// `clusterctl move` and restored backups recreate objects without status (and with new UIDs).
// The host controller alone restores claims (see its restoreClaim and releaseOrphanedClaim); the
// machine never takes another host instead.
func (r *Reconciler) reclaim(s *scope, hosts []infrav1.RedfishHost, name string) (ctrl.Result, error) {
	var h *infrav1.RedfishHost
	for i := range hosts {
		if hosts[i].Name == name {
			h = &hosts[i]
		}
	}
	var msg string
	switch {
	case h == nil:
		msg = fmt.Sprintf("Host %s (from spec.providerID) does not exist", name)
	case h.Status.Claim != nil && h.Status.Claim.Consumer.Name == s.rm.Name && !h.Status.Claim.Release:
		msg = fmt.Sprintf("Host %s (from spec.providerID) holds this machine's claim from before it was recreated; the host adopts it", name)
	case h.Status.Claim != nil:
		msg = fmt.Sprintf("Host %s (from spec.providerID) is claimed by %s %s", name, h.Status.Claim.Consumer.Kind, h.Status.Claim.Consumer.Name)
	default:
		msg = fmt.Sprintf("Host %s (from spec.providerID) is %s; it restores the claim only if its record (annotation %s) names this machine", name, stateName(h), infrav1.HostClaimedByAnnotation)
	}
	conditions.Set(s.rm, metav1.Condition{Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse, Reason: infrav1.WaitingForHostRestoreReason, Message: msg})
	setNotReady(s.rm, infrav1.WaitingForHostRestoreReason, msg)
	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

func stateName(h *infrav1.RedfishHost) string {
	if h.Status.State == "" {
		return "not registered yet"
	}
	return string(h.Status.State)
}

func claimedBy(h *infrav1.RedfishHost, rm *infrav1.RedfishMachine) bool {
	c := h.Status.Claim
	return c != nil && c.ConsumerUID == string(rm.UID)
}

// candidates returns the hosts this machine may claim, best first. With nodeReuse, hosts
// reserved for the machine's owner come first, and while the owner is still releasing hosts
// (a rollout replacing its machines) the machine waits for them instead of taking a fresh one.
func (r *Reconciler) candidates(ctx context.Context, s *scope, hosts []infrav1.RedfishHost, owner *infrav1.ObjectRef, fdLabel string) ([]*infrav1.RedfishHost, string, error) {
	sel := labels.Everything()
	if s.rm.Spec.HostSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(s.rm.Spec.HostSelector); err != nil {
			return nil, "", fmt.Errorf("spec.hostSelector: %w", err)
		}
	}
	fd := s.machine.Spec.FailureDomain
	held, err := r.heldForMaintenance(ctx, s.rm.Namespace)
	if err != nil {
		return nil, "", err
	}
	jobs, err := r.hostsWithJobs(ctx, s.rm.Namespace)
	if err != nil {
		return nil, "", err
	}
	var reserved, free []*infrav1.RedfishHost
	releasing, comingBack := false, ""
	for i := range hosts {
		h := &hosts[i]
		if m, ok := held[h.Name]; ok {
			// Released into a maintenance: never claimed meanwhile. One in mode Reuse gives the host
			// back to its owner's Machines, which wait for it.
			if m.returning && owner != nil && ((h.Status.Claim != nil && h.Status.Claim.Owner != nil && *h.Status.Claim.Owner == *owner) ||
				(h.Status.ReservedFor != nil && *h.Status.ReservedFor == *owner)) {
				comingBack = fmt.Sprintf("maintenance %s (mode Reuse) gives host %s back to %s %s when it is done: waiting for it", m.name, h.Name, owner.Kind, owner.Name)
			}
			continue
		}
		if s.rm.Spec.NodeReuse && owner != nil && r.releasingFor(ctx, h, owner) {
			releasing = true
		}
		if h.Status.State != infrav1.HostStateAvailable || h.Status.Claim != nil || h.Spec.Cordon != nil || !h.DeletionTimestamp.IsZero() || annotations.HasPaused(h) ||
			len(h.Spec.RebootRequests) > 0 || h.Spec.ServiceBoot != nil || h.Status.ServiceBoot != nil || jobs[h.Name] || h.Status.Lease != nil {
			continue // a paused host, one whose power a reboot request holds off, one running a service image, with a RedfishJob to run or a maintenance's firmware work under way would not boot for the claim
		}
		if !sel.Matches(labels.Set(h.Labels)) || (fd != "" && h.Labels[fdLabel] != fd) {
			continue
		}
		if s.rm.Spec.Image.EffectiveFormat().InstallsToDisk() {
			if _, err := install.RootDevice(h.Spec.RootDeviceHints, h.Status.Inventory); err != nil {
				continue // no drive to install to (condition RootDeviceFound on the host says why)
			}
		}
		switch rf := h.Status.ReservedFor; {
		case rf == nil:
			free = append(free, h)
		case owner != nil && *rf == *owner:
			reserved = append(reserved, h)
		}
	}
	sort.Slice(reserved, func(i, j int) bool { return reserved[i].Name < reserved[j].Name })
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] }) // spread racing machines
	if comingBack != "" {
		return nil, comingBack, nil
	}
	if s.rm.Spec.NodeReuse && owner != nil {
		if len(reserved) > 0 {
			return reserved, "", nil
		}
		if releasing {
			return nil, "nodeReuse: waiting for a host this owner is releasing", nil
		}
	}
	return append(reserved, free...), "", nil
}

// availableElsewhere counts the Available, unclaimed hosts in other namespaces that match the
// machine's selector: the usual reason a Machine waits while the servers someone just registered
// sit idle. Only a count: the Machine's owner may not see those namespaces. 0 when the manager
// may not list hosts cluster-wide (a namespaced manager).
func (r *Reconciler) availableElsewhere(ctx context.Context, rm *infrav1.RedfishMachine) int {
	sel := labels.Everything()
	if rm.Spec.HostSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(rm.Spec.HostSelector); err != nil {
			return 0
		}
	}
	all := &infrav1.RedfishHostList{}
	if err := r.Client.List(ctx, all, client.UnsafeDisableDeepCopy); err != nil {
		return 0
	}
	n := 0
	for _, h := range all.Items {
		if h.Namespace != rm.Namespace && h.Status.State == infrav1.HostStateAvailable && h.Status.Claim == nil && h.Spec.Cordon == nil && sel.Matches(labels.Set(h.Labels)) {
			n++
		}
	}
	return n
}

// releasingFor says whether h is on its way back to owner: released with nodeReuse, or claimed
// by a machine of owner whose Machine is being deleted.
func (r *Reconciler) releasingFor(ctx context.Context, h *infrav1.RedfishHost, owner *infrav1.ObjectRef) bool {
	c := h.Status.Claim
	if c == nil || !c.NodeReuse || c.Owner == nil || *c.Owner != *owner {
		return false
	}
	if c.Release {
		// A host that cannot be cleaned never comes back: its owner's Machines must not wait for it.
		if cc := conditions.Get(h, infrav1.CleanedCondition); h.Status.State == infrav1.HostStateCleaning && cc != nil && cc.Reason == infrav1.NothingToEraseReason {
			return false
		}
		return true
	}
	consumer := &infrav1.RedfishMachine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Consumer.Namespace, Name: c.Consumer.Name}, consumer); err != nil {
		return apierrors.IsNotFound(err)
	}
	if !consumer.DeletionTimestamp.IsZero() {
		return true
	}
	m, err := util.GetOwnerMachine(ctx, r.Client, consumer.ObjectMeta)
	return err == nil && m != nil && !m.DeletionTimestamp.IsZero()
}

// tryClaim writes the claim on a copy of h (the cache's own object) and returns it; nil means
// another machine won the host first.
func (r *Reconciler) tryClaim(ctx context.Context, s *scope, h *infrav1.RedfishHost, owner *infrav1.ObjectRef) (*infrav1.RedfishHost, error) {
	rm := s.rm
	claimed := h.DeepCopy()
	claimed.Status.Claim = claim.For(rm, owner)
	if rm.Spec.Image.EffectiveFormat().InstallsToDisk() {
		rd, err := install.RootDevice(h.Spec.RootDeviceHints, h.Status.Inventory)
		if err != nil {
			return nil, nil // its hints or drives changed since it was chosen: another candidate
		}
		claimed.Status.Claim.RootDevice = rd
	}
	claimed.Status.ReservedFor = nil
	// Remembered before it is sent: an answer lost after the update landed must not lead to a
	// claim of another host while the cache lags (see claimsSent).
	r.claimsSent.Store(rm.UID, h.Name)
	err := r.Client.Status().Update(ctx, claimed)
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		r.claimsSent.Delete(rm.UID) // refused: not written
		ctrl.LoggerFrom(ctx).V(4).Info("lost the race for a host", "RedfishHost", h.Name)
		if apierrors.IsConflict(err) {
			metrics.ClaimConflicts.WithLabelValues(h.Namespace, r.conflictOutcome(ctx, h)).Inc()
		}
		return nil, nil
	case err != nil:
		return nil, err
	}
	return claimed, nil
}

// conflictOutcome reads a host whose claim was refused from the API server: "claimed" when
// another machine holds it now, "changed" otherwise.
func (r *Reconciler) conflictOutcome(ctx context.Context, h *infrav1.RedfishHost) string {
	fresh := &infrav1.RedfishHost{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(h), fresh); err == nil && fresh.Status.Claim != nil {
		return "claimed"
	}
	return "changed"
}

// failureDomainLabel is the host label the cluster's RedfishCluster names for failure domains.
func (r *Reconciler) failureDomainLabel(ctx context.Context, cluster *clusterv1.Cluster) string {
	ref := cluster.Spec.InfrastructureRef
	rc := &infrav1.RedfishCluster{}
	if ref.Kind == "RedfishCluster" && r.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, rc) == nil && rc.Spec.FailureDomainLabel != "" {
		return rc.Spec.FailureDomainLabel
	}
	return infrav1.FailureDomainLabel
}

// hostsWithJobs names the hosts of the namespace with a RedfishJob not finished (running or
// waiting): a claim would fight the job over the host's power. Read from the API server, like the
// maintenances: a job created a moment ago wins over the claim.
func (r *Reconciler) hostsWithJobs(ctx context.Context, namespace string) (map[string]bool, error) {
	list := &infrav1.RedfishJobList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(namespace)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	out := map[string]bool{}
	for _, j := range list.Items {
		if !j.Finished() {
			out[j.Spec.HostName] = true
		}
	}
	return out, nil
}

// heldBy is the maintenance that holds a host.
type heldBy struct {
	name string
	// returning: a maintenance in mode Reuse is draining or working on the host, which then goes
	// back to its owner. Not while it waits for approval, budget or a window (the owner's Machines
	// would wait on a maintenance that waits on them), nor after it failed.
	returning bool
}

// heldForMaintenance lists the hosts of the namespace a RedfishMaintenance holds (approved and
// not ended, or failed), with the Maintenance feature gate on or off: turning it off leaves held
// hosts held until their maintenances are deleted. Read from the API server: a maintenance that
// was just approved must win over a claim made a moment later.
func (r *Reconciler) heldForMaintenance(ctx context.Context, namespace string) (map[string]heldBy, error) {
	list := &expv1.RedfishMaintenanceList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(namespace)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil // the experimental CRDs are not installed: nothing is held
		}
		return nil, fmt.Errorf("listing maintenances: %w", err)
	}
	held := map[string]heldBy{}
	for _, m := range list.Items {
		if m.Status.Stage.Holds() {
			h := held[m.Spec.HostName]
			working := m.Status.Stage == expv1.StageDraining || m.Status.Stage == expv1.StageInMaintenance
			held[m.Spec.HostName] = heldBy{name: m.Name, returning: h.returning || (m.Spec.Mode == expv1.Reuse && working)}
		}
	}
	return held, nil
}
