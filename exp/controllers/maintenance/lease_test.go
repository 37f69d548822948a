package maintenance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// flashing is an in-maintenance maintenance of host h with one firmware task of component to
// version 2.0.
func flashing(name string, component expv1.FirmwareComponent) *expv1.RedfishMaintenance {
	return &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), Finalizers: []string{Finalizer}},
		Spec: expv1.RedfishMaintenanceSpec{HostName: "h", Reason: "fw", Requestor: "ops", Policy: expv1.Enforced,
			Tasks: []expv1.MaintenanceTask{{Firmware: &expv1.FirmwareUpdate{Component: component, Retries: ptr.To[int32](2),
				Plan: []expv1.FirmwareVersion{{Version: "2.0", ImageURL: "http://images/2.0.bin"}}}}}},
		Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageInMaintenance}}
}

// leaseWorld is host h (Available) with the maintenances in an API world, the fake BMC behind it,
// and a reconciler on a clock the test moves.
func leaseWorld(t *testing.T, f *fakeBMC, ms ...*expv1.RedfishMaintenance) (*Reconciler, client.Client, *time.Time) {
	t.Helper()
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	objs := []client.Object{&infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}, Status: infrav1.RedfishHostStatus{State: infrav1.HostStateAvailable}}}
	for _, m := range ms {
		objs = append(objs, m)
	}
	c := apiWorld(t, objs...)
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: func() time.Time { return now }, VerifyGrace: 10 * time.Second,
		Connect: func(context.Context, *infrav1.RedfishHost) (BMC, error) { return f, nil }}
	f.now = r.Now
	return r, c, &now
}

// round runs the tasks of m once, on the host as the API world has it, and stores m's status.
func round(t *testing.T, r *Reconciler, c client.Client, m *expv1.RedfishMaintenance) bool {
	t.Helper()
	host := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, host); err != nil {
		t.Fatal(err)
	}
	done, _, err := r.runTasks(context.Background(), m, host)
	if err != nil {
		t.Fatal(err)
	}
	return done
}

// Two maintenances of one host running their tasks at once (the second's round runs while the
// first's update request is on its way, a multipart push that takes minutes): one update request
// reaches the BMC; the second waits for the lease and flashes once the first is done.
func TestTwoMaintenancesOfOneHostNeverFlashAtOnce(t *testing.T) {
	f := &fakeBMC{version: "1.0", applies: true, outcomes: []string{"running"}}
	m1, m2 := flashing("first", expv1.FirmwareBMC), flashing("second", expv1.FirmwareBMC)
	r, c, now := leaseWorld(t, f, m1, m2)
	f.during = func() {
		for range 5 {
			round(t, r, c, m2)
		}
	}
	for range 3 {
		round(t, r, c, m1)
		*now = now.Add(time.Second)
	}
	if f.calls != 1 || len(f.flashed) != 1 {
		t.Fatalf("%d update requests (%d accepted) while the first maintenance's update ran: want 1 (%s)", f.calls, len(f.flashed), describe(m2))
	}
	if got := describe(m2); got == "" || m2.Status.Tasks[0].Phase != expv1.PhaseChecking {
		t.Fatalf("second maintenance %+v (%s): want it waiting before its flash", m2.Status.Tasks[0], got)
	}
	f.outcomes = []string{"ok"}
	for i := 0; !round(t, r, c, m1); i++ {
		if i > 20 {
			t.Fatalf("first maintenance not done: %+v", m1.Status.Tasks[0])
		}
		*now = now.Add(time.Second)
	}
	f.version = "1.0" // the second maintenance has its own image to flash
	for i := 0; !round(t, r, c, m2); i++ {
		if i > 20 {
			t.Fatalf("second maintenance not done once the first ended: %+v (%s)", m2.Status.Tasks[0], describe(m2))
		}
		*now = now.Add(time.Second)
	}
	if f.calls != 2 || len(f.flashed) != 2 {
		t.Errorf("%d update requests, %d accepted: want one each, one after the other", f.calls, len(f.flashed))
	}
}

// A maintenance that timed out while its flash runs keeps the host's lease until the BMC shows the
// flash ended: the next maintenance of the host waits it out.
func TestATimedOutMaintenancesFlashIsWaitedOutByTheNext(t *testing.T) {
	f := &fakeBMC{version: "1.0", applies: true, outcomes: []string{"running"}}
	m1, m2 := flashing("first", expv1.FirmwareBMC), flashing("second", expv1.FirmwareBMC)
	m1.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
	r, c, now := leaseWorld(t, f, m1, m2)
	m1.Status.Stages = []expv1.StageTime{{Stage: expv1.StageApproved, Time: metav1.NewTime(*now)}}
	for range 3 {
		round(t, r, c, m1)
	}
	if err := c.Status().Update(context.Background(), m1); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(2 * time.Minute)
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m1)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(m1), m1); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	if m1.Status.Stage != expv1.StageFailed {
		t.Fatalf("first maintenance in stage %s: want Failed on its timeout", m1.Status.Stage)
	}
	for range 5 {
		reconcile()
		round(t, r, c, m2)
		*now = now.Add(time.Second)
	}
	if f.calls != 1 {
		t.Fatalf("%d update requests while the timed-out maintenance's flash ran: want 1 (%s)", f.calls, describe(m2))
	}
	f.outcomes = []string{"ok"}
	if _, err := f.TaskStatus(context.Background(), "/tasks/1"); err != nil { // the BMC's flash ends
		t.Fatal(err)
	}
	reconcile()
	f.version = "1.0"
	for i := 0; !round(t, r, c, m2); i++ {
		if i > 20 {
			t.Fatalf("second maintenance not done once the flash ended: %+v (%s)", m2.Status.Tasks[0], describe(m2))
		}
		*now = now.Add(time.Second)
	}
	if f.calls != 2 {
		t.Errorf("%d update requests: want the second one after the first flash ended", f.calls)
	}
}

// A flash whose round lost its outcome (the status write after the request never landed: a
// crash, a lost answer) is followed on the BMC, not sent again, though a BIOS image only applies
// at the next boot (the inventory still reports the old version and the task is no longer running).
func TestAFlashWhoseRoundLostItsOutcomeIsNotSentAgain(t *testing.T) {
	f := &fakeBMC{version: "1.0", outcomes: []string{"ok"}} // staged: the version changes at the next boot
	m := flashing("bios", expv1.FirmwareBIOS)
	r, c, now := leaseWorld(t, f, m)
	round(t, r, c, m) // Checking → the lease, then the request
	if f.calls != 1 {
		t.Fatalf("%d update requests in the first round: want 1", f.calls)
	}
	lost := m.DeepCopy()
	lost.Status.Tasks[0] = expv1.MaintenanceTaskStatus{State: expv1.TaskRunning, Phase: expv1.PhaseChecking, Attempt: 1,
		StepStartTime: m.Status.Tasks[0].StepStartTime, PhaseStartTime: m.Status.Tasks[0].StepStartTime}
	if _, err := f.TaskStatus(context.Background(), "/tasks/1"); err != nil { // the BMC's task ends: the image is staged
		t.Fatal(err)
	}
	for range 5 {
		round(t, r, c, lost)
		*now = now.Add(time.Second)
	}
	if f.calls != 1 {
		t.Fatalf("%d update requests: the update sent before the lost write was sent again", f.calls)
	}
	if st := lost.Status.Tasks[0]; st.Phase != expv1.PhaseApplying || st.Job == "" {
		t.Errorf("task %+v: want the staged image applied by a boot into the BIOS setup", st)
	}
}

// Nothing reaches a paused host's BMC from a maintenance: no connection, no flash; the Paused
// condition says why, and the work goes on once the annotation goes.
func TestAMaintenanceSendsNothingToAPausedHost(t *testing.T) {
	f := &fakeBMC{version: "1.0", applies: true, outcomes: []string{"ok"}}
	m := flashing("bios", expv1.FirmwareBIOS)
	r, c, now := leaseWorld(t, f, m)
	h := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
		t.Fatal(err)
	}
	h.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	if err := c.Update(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	connects := 0
	connect := r.Connect
	r.Connect = func(ctx context.Context, h *infrav1.RedfishHost) (BMC, error) {
		connects++
		return connect(ctx, h)
	}
	key := client.ObjectKeyFromObject(m)
	for range 5 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		*now = now.Add(time.Second)
	}
	if err := c.Get(context.Background(), key, m); err != nil {
		t.Fatal(err)
	}
	if connects != 0 || f.calls != 0 || !conditions.IsTrue(m, clusterv1.PausedCondition) {
		t.Errorf("%d BMC connections, %d update requests, Paused %v for the maintenance of a paused host: want none, Paused True", connects, f.calls, conditions.IsTrue(m, clusterv1.PausedCondition))
	}
}

// A BMC that echoes the image server's password in its task messages: the password is masked
// before a message reaches the status, a condition or an event.
func TestAnImageServerPasswordEchoedByTheBMCIsMasked(t *testing.T) {
	const pw = "img-pw-7d2c"
	f := &fakeBMC{version: "1.0", outcomes: []string{"running"}, echo: " as fw-reader:" + pw}
	m := flashing("bios", expv1.FirmwareBMC)
	m.Spec.Tasks[0].Firmware.ImageCredentialsSecretName = "image-creds"
	m.Spec.Tasks[0].Firmware.Retries = ptr.To[int32](0)
	r, c, now := leaseWorld(t, f, m)
	if err := c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "image-creds", Labels: map[string]string{ImageCredentialsLabel: "true"}},
		Data: map[string][]byte{"username": []byte("fw-reader"), "password": []byte(pw)}}); err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(100)
	r.Recorder = rec
	var seen []string
	for i := range 6 {
		if i == 3 {
			f.outcomes = []string{"critical"}
		}
		round(t, r, c, m)
		seen = append(seen, m.Status.Tasks[0].Message, conditions.GetMessage(m, infrav1.ReadyCondition))
		*now = now.Add(time.Second)
	}
	close(rec.Events)
	for e := range rec.Events {
		seen = append(seen, e)
	}
	all := strings.Join(seen, "\n")
	if strings.Contains(all, pw) || !strings.Contains(all, "fw-reader:***") {
		t.Errorf("messages and events:\n%s\nwant the BMC's echo with the password masked", all)
	}
}

// An apply job the maintenance created is never created again once it is gone (collected after
// its TTL while the maintenance was paused or the gate off): that would boot the host into its
// BIOS setup once more. The verification decides.
func TestAnApplyJobThatIsGoneIsNotCreatedAgain(t *testing.T) {
	m, host := biosMaintenance(map[string]string{"BootMode": `"LegacyBios"`})
	m.UID = "m-uid"
	at := metav1.NewTime(time.Now())
	m.Status.Tasks = []expv1.MaintenanceTaskStatus{{State: expv1.TaskRunning, Phase: expv1.PhaseApplying, Attempt: 1, StepStartTime: &at, PhaseStartTime: &at,
		Job: jobName("m", 0, 0, 0, 1, "apply")}}
	host.Status.State = infrav1.HostStateAvailable
	host.Status.Lease = &infrav1.HostLease{Holder: holderRef(m), HolderUID: "m-uid", AcquiredAt: at}
	c := apiWorld(t, host)
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now,
		Connect: func(context.Context, *infrav1.RedfishHost) (BMC, error) {
			return &fakeBIOS{current: map[string]any{"BootMode": "Uefi"}}, nil
		}}
	round(t, r, c, m)
	jobs := &infrav1.RedfishJobList{}
	if err := c.List(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 || m.Status.Tasks[0].Phase != expv1.PhaseVerifying {
		t.Errorf("%d job(s) created, task %+v: want the gone job not created again, and the verification next", len(jobs.Items), m.Status.Tasks[0])
	}
}

// The Machine is deleted under the UID the maintenance recorded: one re-created under its name
// since the cache was read is refused by the API server, never deleted.
func TestTheMachineIsDeletedOnlyUnderTheRecordedUID(t *testing.T) {
	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-1", UID: "machine-uid"}}
	m := approvedOn("m", "h", time.Now())
	m.Status.Stage, m.Status.Machine, m.Status.MachineUID = expv1.StageDraining, "w-1", "machine-uid"
	host := readyHost("h")
	var deleted []client.DeleteOption
	c := interceptor.NewClient(apiWorld(t, host, machine, m).(client.WithWatch), interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deleted = append(deleted, opts...)
			return c.Delete(ctx, obj, opts...)
		}})
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now}
	if _, err := r.drain(context.Background(), m, host, nil, machine); err != nil {
		t.Fatal(err)
	}
	do := &client.DeleteOptions{}
	do.ApplyOptions(deleted)
	if do.Preconditions == nil || do.Preconditions.UID == nil || *do.Preconditions.UID != "machine-uid" {
		t.Errorf("Machine deleted with options %+v: want the precondition UID machine-uid", do)
	}
}

// A power hold of a predecessor under the same name is not taken for the maintenance's own: it
// does not count as held, is not withdrawn as its own, and is taken over when a hold is wanted.
func TestAPredecessorsHoldUnderTheSameNameIsNotTheMaintenances(t *testing.T) {
	m := flashing("fw", expv1.FirmwareBIOS)
	host := readyHost("h")
	host.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: requestor(m), RequestorUID: "predecessor", Mode: infrav1.RebootModeHard}}
	c := apiWorld(t, host)
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now}
	get := func() *infrav1.RedfishHost {
		h := &infrav1.RedfishHost{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(host), h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	if err := r.setHold(context.Background(), get(), m, false); err != nil {
		t.Fatal(err)
	}
	if rr := get().Spec.RebootRequests; len(rr) != 1 || rr[0].RequestorUID != "predecessor" {
		t.Fatalf("reboot requests %+v: a predecessor's hold was withdrawn as the maintenance's own", rr)
	}
	if err := r.setHold(context.Background(), get(), m, true); err != nil {
		t.Fatal(err)
	}
	if rr := get().Spec.RebootRequests; len(rr) != 1 || rr[0].RequestorUID != string(m.UID) {
		t.Errorf("reboot requests %+v: want the maintenance's own hold (its UID) in the predecessor's place", rr)
	}
}

// Deleting a maintenance whose image runs on the host winds down as a completion does: the image
// is ejected and the host off, with the power held, before the hold goes; the host is never
// handed back running the image.
func TestADeletedImageMaintenanceHandsTheHostBackOffAndEjected(t *testing.T) {
	m := approvedOn("diag", "h", time.Now())
	m.Spec.Tasks = []expv1.MaintenanceTask{{BootImage: &expv1.BootImage{URL: "http://images/diag.iso"}}}
	m.Status.Stage, m.Finalizers = expv1.StageInMaintenance, []string{Finalizer}
	host := readyHost("h")
	host.Status.State, host.Status.PowerState = infrav1.HostStateAvailable, "On"
	host.Spec.ServiceBoot = &infrav1.ServiceBoot{Requestor: requestor(m), Image: "http://images/diag.iso"}
	host.Status.ServiceBoot = &infrav1.ServiceBootStatus{Requestor: requestor(m), Image: "images/diag.iso"}
	host.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: requestor(m), RequestorUID: string(m.UID), Mode: infrav1.RebootModeHard}}
	c := apiWorld(t, host, m)
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now}
	key := client.ObjectKeyFromObject(m)
	reconcile := func() (*expv1.RedfishMaintenance, *infrav1.RedfishHost) {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		got, h := &expv1.RedfishMaintenance{}, &infrav1.RedfishHost{}
		if err := c.Get(context.Background(), key, got); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(host), h); err != nil {
			t.Fatal(err)
		}
		return got, h
	}
	got, h := reconcile()
	if len(got.Finalizers) == 0 || len(h.Spec.RebootRequests) != 1 || h.Spec.ServiceBoot != nil {
		t.Fatalf("finalizers %v, reboot requests %+v, service boot %+v: want the image asked out with the power still held", got.Finalizers, h.Spec.RebootRequests, h.Spec.ServiceBoot)
	}
	h.Status.ServiceBoot, h.Status.PowerState = nil, "Off" // the host controller ejects and powers off
	if err := c.Status().Update(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	got, h = reconcile()
	if len(got.Finalizers) != 0 || len(h.Spec.RebootRequests) != 0 {
		t.Errorf("finalizers %v, reboot requests %+v: want the hold withdrawn once the host is off and ejected", got.Finalizers, h.Spec.RebootRequests)
	}
}

// Two maintenances that both read the host's lease free (from a cache, at once): the lease is
// written with the version read as a precondition, so one write lands and the other is refused.
func TestOfTwoMaintenancesThatReadTheLeaseFreeOneTakesIt(t *testing.T) {
	m1, m2 := flashing("first", expv1.FirmwareBIOS), flashing("second", expv1.FirmwareBIOS)
	r, c, _ := leaseWorld(t, &fakeBMC{}, m1, m2)
	read := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, read); err != nil {
		t.Fatal(err)
	}
	stale := read.DeepCopy()
	who1, err1 := r.acquire(context.Background(), m1, read)
	who2, err2 := r.acquire(context.Background(), m2, stale)
	if who1 != "" || err1 != nil {
		t.Fatalf("first acquire: %q, %v", who1, err1)
	}
	if err2 == nil && who2 == "" {
		t.Fatal("both maintenances took the lease from the same read")
	}
	got := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Lease == nil || got.Status.Lease.HolderUID != string(m1.UID) {
		t.Errorf("lease %+v: want the first's", got.Status.Lease)
	}
}

// An update the BMC refused (an answer: nothing started) is sent again; one whose outcome is not
// known (a timeout) is never sent again: the BMC is given the grace to list it, then a BIOS image
// is applied by the boot into the BIOS setup and the inventory decides.
func TestARefusedUpdateIsSentAgainAnUnknownOneNever(t *testing.T) {
	f := &fakeBMC{version: "1.0", outcomes: []string{"ok"}, failOnce: fmt.Errorf("%w: HTTP 400", bmc.ErrRefused)}
	m := flashing("bios", expv1.FirmwareBIOS)
	r, c, now := leaseWorld(t, f, m)
	for range 2 {
		round(t, r, c, m)
		*now = now.Add(time.Second)
	}
	if f.calls != 2 || len(f.flashed) != 1 {
		t.Fatalf("%d requests, %d accepted after a refusal: want it sent again once", f.calls, len(f.flashed))
	}

	f2 := &fakeBMC{version: "1.0", outcomes: []string{"ok"}, failOnce: errors.New("context deadline exceeded")}
	m2 := flashing("bios", expv1.FirmwareBIOS)
	r2, c2, now2 := leaseWorld(t, f2, m2)
	for range 5 { // within the grace (10 s)
		round(t, r2, c2, m2)
		*now2 = now2.Add(time.Second)
	}
	if f2.calls != 1 || m2.Status.Tasks[0].Phase != expv1.PhaseChecking || !strings.Contains(m2.Status.Tasks[0].Message, "waiting for the BMC to list") {
		t.Fatalf("%d requests, task %+v: want the unknown one waited for, not sent again", f2.calls, m2.Status.Tasks[0])
	}
	*now2 = now2.Add(10 * time.Second)
	round(t, r2, c2, m2)
	if f2.calls != 1 || m2.Status.Tasks[0].Phase != expv1.PhaseApplying {
		t.Errorf("%d requests, task %+v: want the boot into the BIOS setup after the grace, no second request", f2.calls, m2.Status.Tasks[0])
	}
}

// A BMC-only update waits for a host being provisioned without taking its lease: the host's own
// work waits for a held lease, so taking it first would leave each waiting for the other.
func TestABMCOnlyUpdateWaitsForASettledHostWithoutTakingItsLease(t *testing.T) {
	f := &fakeBMC{version: "1.0", applies: true, outcomes: []string{"ok"}}
	m := flashing("bmc", expv1.FirmwareBMC)
	r, c, now := leaseWorld(t, f, m)
	h := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
		t.Fatal(err)
	}
	h.Status.State = infrav1.HostStateProvisioning
	if err := c.Status().Update(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		round(t, r, c, m)
		*now = now.Add(time.Second)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
		t.Fatal(err)
	}
	if f.calls != 0 || h.Status.Lease != nil || !strings.Contains(m.Status.Tasks[0].Message, "settle") {
		t.Fatalf("%d update requests, lease %+v, task %+v: want no request and no lease while the host is provisioned", f.calls, h.Status.Lease, m.Status.Tasks[0])
	}
	h.Status.State = infrav1.HostStateProvisioned
	h.Status.Claim = &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Name: "rm"}, ConsumerUID: "rm-uid"}
	if err := c.Status().Update(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	for i := 0; !round(t, r, c, m); i++ {
		if i > 20 {
			t.Fatalf("not done once the host settled: %+v", m.Status.Tasks[0])
		}
		*now = now.Add(time.Second)
	}
	if f.calls != 1 {
		t.Errorf("%d update requests: want one once the host settled", f.calls)
	}
}

// An update the BMC accepted without a task to follow is done only once the BMC lists no update
// running: a BIOS image is not booted into while it is written.
func TestAnUpdateAcceptedWithoutATaskIsWaitedOutBeforeTheBoot(t *testing.T) {
	f := &fakeBMC{version: "1.0", outcomes: []string{"running"}, noMonitor: true}
	m := flashing("bios", expv1.FirmwareBIOS)
	r, c, now := leaseWorld(t, f, m)
	for range 4 {
		round(t, r, c, m)
		*now = now.Add(time.Second)
	}
	if st := m.Status.Tasks[0]; st.Phase != expv1.PhaseFlashing || st.Job != "" {
		t.Fatalf("task %+v while the BMC lists the update running: want it waited out, no boot", st)
	}
	f.running = false // the BMC's update ends
	for range 3 {
		round(t, r, c, m)
		*now = now.Add(time.Second)
	}
	if st := m.Status.Tasks[0]; st.Phase != expv1.PhaseApplying || f.calls != 1 {
		t.Errorf("task %+v after %d requests: want the boot into the BIOS setup once the update ended, one request", st, f.calls)
	}
}

// Another maintenance's image running on the host (a vendor's updater) keeps the lease from a
// flash.
func TestNoLeaseUnderAnotherMaintenancesImage(t *testing.T) {
	m := flashing("bios", expv1.FirmwareBIOS)
	r, c, _ := leaseWorld(t, &fakeBMC{}, m)
	h := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
		t.Fatal(err)
	}
	h.Spec.ServiceBoot = &infrav1.ServiceBoot{Requestor: RequestorPrefix + "diag", Image: "http://images/diag.iso"}
	if who, err := r.acquire(context.Background(), m, h); err != nil || who == "" || h.Status.Lease != nil {
		t.Errorf("acquire under another's image: %q, %v, lease %+v: want refused", who, err, h.Status.Lease)
	}
}

// A deleted maintenance whose BMC never answers releases the host's lease at most its longest
// step timeout after the deletion, not never.
func TestADeletedMaintenanceGivesUpOnASilentBMC(t *testing.T) {
	m := flashing("bios", expv1.FirmwareBMC)
	m.Status.Tasks = []expv1.MaintenanceTaskStatus{{State: expv1.TaskSucceeded}}
	r, c, now := leaseWorld(t, &fakeBMC{}, m)
	r.Connect = func(context.Context, *infrav1.RedfishHost) (BMC, error) { return nil, errors.New("connection refused") }
	h := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
		t.Fatal(err)
	}
	if who, err := r.acquire(context.Background(), m, h); err != nil || who != "" {
		t.Fatal(who, err)
	}
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	*now = time.Now()
	reconcile := func() *infrav1.RedfishHost {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)}); err != nil {
			t.Fatal(err)
		}
		got := &infrav1.RedfishHost{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := reconcile(); got.Status.Lease == nil {
		t.Fatal("the lease went at once, with the BMC not answering")
	}
	*now = now.Add(DefaultStepTimeout + time.Minute)
	if got := reconcile(); got.Status.Lease != nil {
		t.Errorf("lease %+v kept %s after the deletion: want it released", got.Status.Lease, DefaultStepTimeout+time.Minute)
	}
}

// A maintenance that flashes the BIOS and then runs an image: once the firmware is done its
// tasks' power hold goes and stays gone, and the image is asked for (it booted never before:
// the hold was put back every round).
func TestAnImageAfterFirmwareTasksIsBooted(t *testing.T) {
	m := flashing("fw-diag", expv1.FirmwareBIOS)
	m.Spec.Tasks = append(m.Spec.Tasks, expv1.MaintenanceTask{BootImage: &expv1.BootImage{URL: "http://images/diag.iso"}})
	m.Status.Tasks = []expv1.MaintenanceTaskStatus{{State: expv1.TaskSucceeded}, {}}
	r, c, _ := leaseWorld(t, &fakeBMC{}, m)
	h := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
		t.Fatal(err)
	}
	h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: requestor(m), RequestorUID: string(m.UID), Mode: infrav1.RebootModeHard}}
	if err := c.Update(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
			t.Fatal(err)
		}
		if _, err := r.work(context.Background(), m, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
		t.Fatal(err)
	}
	if len(h.Spec.RebootRequests) != 0 || h.Spec.ServiceBoot == nil {
		t.Errorf("reboot requests %+v, service boot %+v: want no hold and the image asked for", h.Spec.RebootRequests, h.Spec.ServiceBoot)
	}
	// The next round's tasks (all done) leave the power alone: no hold put back for a moment.
	if _, _, err := r.runTasks(context.Background(), m, h); err != nil {
		t.Fatal(err)
	}
	if len(h.Spec.RebootRequests) != 0 {
		t.Errorf("reboot requests %+v after a round of the done tasks: the hold was put back", h.Spec.RebootRequests)
	}
}

// A RedfishJob of another that started before the lease was taken runs to its end before the
// holder sends anything to the BMC (a job that starts later sees the lease and waits).
func TestAJobStartedBeforeTheLeaseIsWaitedOut(t *testing.T) {
	f := &fakeBMC{version: "1.0", applies: true, outcomes: []string{"ok"}}
	m := flashing("bmc", expv1.FirmwareBMC)
	started := metav1.NewMicroTime(time.Now())
	job := &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "user-cycle"},
		Spec:   infrav1.RedfishJobSpec{HostName: "h", Tasks: []infrav1.JobTask{{Power: infrav1.JobPowerOn}}},
		Status: infrav1.RedfishJobStatus{StartTime: &started}}
	r, c, now := leaseWorld(t, f, m)
	if err := c.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	job.Status.StartTime = &started
	if err := c.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		round(t, r, c, m)
		*now = now.Add(time.Second)
	}
	if f.calls != 0 || !strings.Contains(describe(m), "user-cycle") {
		t.Fatalf("%d update requests (%s) while a job of another runs on the host: want none, waiting for it", f.calls, describe(m))
	}
	done := metav1.NewMicroTime(time.Now())
	job.Status.CompletionTime = &done
	if err := c.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	for i := 0; !round(t, r, c, m); i++ {
		if i > 20 {
			t.Fatalf("not done once the job ended: %+v", m.Status.Tasks[0])
		}
		*now = now.Add(time.Second)
	}
	if f.calls != 1 {
		t.Errorf("%d update requests: want one, after the job", f.calls)
	}
}

// A lease whose holder is gone is taken over by the next maintenance; one of a maintenance of the
// same name under a new UID (clusterctl move) keeps the flash intent it recorded; a live holder's
// is not taken.
func TestALeaseOfAGoneHolderIsTakenOverKeepingTheIntentOfTheSameName(t *testing.T) {
	intent := &infrav1.FlashIntent{Component: "BIOS", Version: "2.0", Attempt: 1}
	for _, tc := range []struct {
		holder, holderUID string
		taken, keeps      bool
	}{
		{holder: "live", holderUID: "live-uid", taken: false},
		{holder: "gone", holderUID: "gone-uid", taken: true, keeps: false},
		{holder: "bios", holderUID: "bios-old-uid", taken: true, keeps: true}, // moved: a new UID
	} {
		m := flashing("bios", expv1.FirmwareBIOS)
		live := flashing("live", expv1.FirmwareBIOS)
		r, c, _ := leaseWorld(t, &fakeBMC{}, m, live)
		h := &infrav1.RedfishHost{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "h"}, h); err != nil {
			t.Fatal(err)
		}
		h.Status.Lease = &infrav1.HostLease{Holder: infrav1.ObjectRef{Kind: "RedfishMaintenance", Namespace: "ns", Name: tc.holder}, HolderUID: tc.holderUID, Flash: intent.DeepCopy()}
		if err := c.Status().Update(context.Background(), h); err != nil {
			t.Fatal(err)
		}
		who, err := r.acquire(context.Background(), m, h)
		if err != nil {
			t.Fatal(err)
		}
		if got := who == ""; got != tc.taken {
			t.Errorf("holder %s: taken %v (%q), want %v", tc.holder, got, who, tc.taken)
			continue
		}
		if !tc.taken {
			continue
		}
		if h.Status.Lease.HolderUID != string(m.UID) || (h.Status.Lease.Flash != nil) != tc.keeps {
			t.Errorf("holder %s: lease %+v, want it the maintenance's, intent kept %v", tc.holder, h.Status.Lease, tc.keeps)
		}
	}
}
