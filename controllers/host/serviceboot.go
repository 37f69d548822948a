package host

import (
	"context"
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
)

// serviceBoot runs spec.serviceBoot's image instead of the host's OS, on an Available host (a
// maintenance in mode Replace) or a Provisioned one (mode Reuse). It reports whether it handled
// the round; when it did not, the state's own power logic runs.
//
// Starting: the host is powered off, the image inserted with a Continuous boot override to the
// virtual CD, status.serviceBoot recorded; then only a host found off is powered on (a power-on
// whose answer was lost is not sent twice; a host the BMC powered off runs the image again).
// A reboot request wins: nothing is powered on while one is there. Stopping (spec entry gone or
// asked by another requestor): the image is ejected and the override cleared before anything
// else; the power is the state's business again.
func (r *Reconciler) serviceBoot(ctx context.Context, s *scope) (bool, ctrl.Result, error) {
	h := s.host
	want, done := h.Spec.ServiceBoot, h.Status.ServiceBoot
	switch {
	case want == nil && done == nil:
		return false, ctrl.Result{}, nil
	case r.heldBy(h, nil, "service boot"):
		// A maintenance flashes or boots the host (its lease): no power action, media or boot
		// override until the lease is released, which wakes the host.
		return true, ctrl.Result{RequeueAfter: r.CheckInterval}, nil
	case done != nil && (want == nil || done.Requestor != want.Requestor || done.Image != ImageKey(want.Image)):
		// The boot made is not (or no longer) the one asked for: it ends first, whatever holds
		// the power, so that its requestor sees it gone.
		if err := s.bmc.EjectMedia(ctx, done.Image); err != nil {
			return true, ctrl.Result{}, err
		}
		if err := s.bmc.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootNone}); err != nil {
			return true, ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(err)
		}
		r.event(h, "ServiceBootEnded", "ServiceBoot", "ejected %s of %s", done.Image, done.Requestor)
		h.Status.ServiceBoot = nil
		return true, ctrl.Result{RequeueAfter: r.PollInterval}, nil
	case len(h.Spec.RebootRequests) > 0:
		return false, ctrl.Result{}, nil // held off: the state powers the host off
	case done == nil:
		if s.power != bmc.PowerOff {
			return true, ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(r.reset(ctx, s, bmc.ResetForceOff))
		}
		// Without the claim's media: a live image and its seed volume, attached for a live boot,
		// leave first, so that the service image neither boots beside the node's bootstrap data
		// nor finds it. Media the seed server did not provide (an operator's) stay.
		if err := s.bmc.EjectMedia(ctx, r.seedMediaMatch(h)); err != nil {
			return true, ctrl.Result{}, err
		}
		if err := s.bmc.InsertMedia(ctx, want.Image, ""); err != nil {
			return true, ctrl.Result{}, err
		}
		if err := s.bmc.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootCd, Continuous: true}); err != nil {
			return true, ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(err)
		}
		// Recorded before the power-on, as the provisioning boot is.
		h.Status.ServiceBoot = &infrav1.ServiceBootStatus{Requestor: want.Requestor, Image: ImageKey(want.Image), BootIssuedAt: metav1.Now()}
		r.event(h, "ServiceBoot", "ServiceBoot", "booting %s for %s", bmc.Redact(want.Image), want.Requestor)
		return true, ctrl.Result{RequeueAfter: r.PollInterval}, nil
	case s.power == bmc.PowerOff:
		return true, ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(r.reset(ctx, s, bmc.ResetOn))
	}
	return true, ctrl.Result{RequeueAfter: r.CheckInterval}, nil
}

// ImageKey is what status.serviceBoot records of an image URL: its host and path, without the
// credentials a URL may carry (userinfo, a presigned query); the BMC's copy of the URL contains it,
// so it also finds the medium to eject.
func ImageKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return bmc.Redact(raw)
	}
	return u.Host + u.EscapedPath()
}
