package maintenance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	hostctrl "github.com/caprf/cluster-api-provider-redfish/controllers/host"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/apireads"
	"github.com/caprf/cluster-api-provider-redfish/internal/fresh"
)

// fakeBIOS is a BMC whose staged BIOS settings apply only when applies is set.
type fakeBIOS struct {
	fakeBMC
	current, staged map[string]any
	applies         bool
}

func (f *fakeBIOS) SetBIOSAttributes(_ context.Context, attrs map[string]any) error {
	f.staged = attrs
	return nil
}

func (f *fakeBIOS) BIOSAttributes(context.Context) (map[string]any, error) { return f.current, nil }

// boot is what a boot into the BIOS setup does to the fake.
func (f *fakeBIOS) boot() {
	if f.applies {
		for k, v := range f.staged {
			f.current[k] = v
		}
	}
	f.staged = nil
}

func apiWorld(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme, clusterv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&expv1.RedfishMaintenance{}, HostIndex, func(o client.Object) []string { return []string{o.(*expv1.RedfishMaintenance).Spec.HostName} }).
		WithIndex(&infrav1.RedfishJob{}, hostctrl.JobHostField, func(o client.Object) []string { return []string{o.(*infrav1.RedfishJob).Spec.HostName} }).
		WithStatusSubresource(&expv1.RedfishMaintenance{}, &expv1.RedfishMaintenancePolicy{}, &infrav1.RedfishJob{}, &infrav1.RedfishHost{}).Build()
}

// finishJobs marks the maintenance's RedfishJobs completed, as the job controller would; a job
// booting the host into its BIOS setup applies what was staged. It reports how many boots it made.
func finishJobs(t *testing.T, c client.Client, boot func()) int {
	t.Helper()
	jobs := &infrav1.RedfishJobList{}
	if err := c.List(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.Finished() {
			continue
		}
		ts := j.Spec.Tasks
		if !strings.HasSuffix(j.Name, "-apply") || len(ts) != 5 || ts[0].Power != infrav1.JobPowerForceOff || ts[1].BootOnce != "BiosSetup" ||
			ts[2].Power != infrav1.JobPowerOn || ts[3].WaitForBootProgress == nil || ts[3].WaitForBootProgress.State != "SetupEntered" ||
			ts[4].Power != infrav1.JobPowerForceOff {
			t.Fatalf("job %s: %+v, want off, boot once into the BIOS setup, on, wait for SetupEntered, off", j.Name, ts)
		}
		boot()
		n++
		now := metav1.NowMicro()
		j.Status.CompletionTime = &now
		conditions.Set(j, metav1.Condition{Type: infrav1.JobCompletedCondition, Status: metav1.ConditionTrue, Reason: "Finished"})
		if err := c.Status().Update(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func biosMaintenance(attrs map[string]string) (*expv1.RedfishMaintenance, *infrav1.RedfishHost) {
	raw := map[string]apiextensionsv1.JSON{}
	for k, v := range attrs {
		raw[k] = apiextensionsv1.JSON{Raw: []byte(v)}
	}
	m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "m-uid"},
		Spec:   expv1.RedfishMaintenanceSpec{HostName: "h", Tasks: []expv1.MaintenanceTask{{BIOSSettings: &expv1.BIOSSettings{Attributes: raw, Retries: ptr.To[int32](1)}}}},
		Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageInMaintenance}}
	return m, &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}
}

// BIOS settings are verified after the boot that applies them; those that did not take are named
// (never their values), write-only ones (passwords, read back as null) are not held against it, and
// the host stays held off.
func TestBIOSSettingsThatDoNotTakeAreReportedByNameNeverByValue(t *testing.T) {
	for _, applies := range []bool{true, false} {
		f := &fakeBIOS{current: map[string]any{"BootMode": "Uefi", "AdminPassword": nil, "NumaGroupSizeOpt": float64(1)}, applies: applies}
		m, host := biosMaintenance(map[string]string{"BootMode": `"LegacyBios"`, "AdminPassword": `"s3cret-pw"`, "NumaGroupSizeOpt": `2`})
		c := apiWorld(t, host)
		now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
		r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: func() time.Time { return now }, VerifyGrace: 15 * time.Second,
			Connect: func(context.Context, *infrav1.RedfishHost) (BMC, error) { return f, nil }}
		boots := 0
		for range 200 {
			done, _, err := r.runTasks(context.Background(), m, host)
			if err != nil {
				t.Fatal(err)
			}
			if done || m.Status.Tasks[0].State == expv1.TaskFailed {
				break
			}
			boots += finishJobs(t, c, f.boot)
			now = now.Add(r.PollInterval)
		}
		st := m.Status.Tasks[0]
		if applies {
			if st.State != expv1.TaskSucceeded || boots != 1 {
				t.Errorf("settings that took: task %+v after %d boot(s), want succeeded after one", st, boots)
			}
			continue
		}
		if st.State != expv1.TaskFailed || boots != 2 {
			t.Fatalf("settings that did not take: task %+v after %d boot(s), want failed after two attempts", st, boots)
		}
		for _, name := range []string{"BootMode", "NumaGroupSizeOpt"} {
			if !strings.Contains(st.Message, name) {
				t.Errorf("message %q does not name %s", st.Message, name)
			}
		}
		if strings.Contains(st.Message, "AdminPassword") {
			t.Errorf("message %q: a write-only attribute (read back as null) cannot be verified", st.Message)
		}
		if msg := st.Message + conditions.GetMessage(m, infrav1.ReadyCondition); strings.Contains(msg, "s3cret-pw") || strings.Contains(msg, "LegacyBios") {
			t.Errorf("a value reached the status: %q", msg)
		}
		held := &infrav1.RedfishHost{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(host), held); err != nil || len(held.Spec.RebootRequests) != 1 {
			t.Errorf("host reboot requests %+v (%v): want the maintenance's power hold kept", held.Spec.RebootRequests, err)
		}
	}
}

func TestImageCredentialsAreCheckedBeforeTheAnnouncement(t *testing.T) {
	plan := func(secret string) *expv1.RedfishMaintenance {
		return &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
			Spec: expv1.RedfishMaintenanceSpec{HostName: "h", Tasks: []expv1.MaintenanceTask{{Firmware: &expv1.FirmwareUpdate{Component: expv1.FirmwareBIOS,
				ImageCredentialsSecretName: secret, Plan: []expv1.FirmwareVersion{{Version: "2", ImageURL: "http://images/2.bin"}}}}}},
			Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StagePending}}
	}
	label := map[string]string{ImageCredentialsLabel: "true"}
	c := apiWorld(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "half", Labels: label}, Data: map[string][]byte{"username": []byte("u")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bmc-creds"}, Data: map[string][]byte{"username": []byte("root"), "password": []byte("calvin")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "good", Labels: label}, Data: map[string][]byte{"username": []byte("u"), "password": []byte("p4ss")}})
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now}
	host := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}
	for secret, want := range map[string]string{"missing": "image credentials Secret missing not found", "half": "needs the keys username and password",
		"bmc-creds": "lacks the label caprf.io/image-credentials", "good": ""} {
		m := plan(secret)
		ok, _ := r.checkTasks(context.Background(), m, host)
		switch {
		case want == "" && (!ok || m.Status.Tasks[0].State != expv1.TaskPending):
			t.Errorf("%s: refused (%s)", secret, describe(m))
		case want != "" && (ok || m.Status.Stage != expv1.StagePending || conditions.GetReason(m, infrav1.ReadyCondition) != InvalidTaskReason || !strings.Contains(describe(m), want)):
			t.Errorf("%s: stage %s, %s; want Pending, InvalidTask with %q", secret, m.Status.Stage, describe(m), want)
		}
	}
	creds, err := r.imageCredentials(context.Background(), plan("good"), plan("good").Spec.Tasks[0].Firmware)
	if err != nil || *creds != (bmc.ImageCredentials{Username: "u", Password: "p4ss"}) {
		t.Errorf("credentials %+v, %v", creds, err)
	}
}

func TestADeletedMaintenanceWaitsOutAFlashBeforeHandingTheHostBack(t *testing.T) {
	f := &fakeBMC{version: "1.0", applies: true, outcomes: []string{"running"}}
	r, m, now := bmcUpdate(t, f, 2, "2.0")
	host := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}
	rounds(t, r, m, now, 3) // flashing
	m.Finalizers = []string{Finalizer}
	c := apiWorld(t, host, m)
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r.Client, r.APIReader = c, c
	key := client.ObjectKeyFromObject(m)
	reconcile := func() *expv1.RedfishMaintenance {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		got := &expv1.RedfishMaintenance{}
		if err := c.Get(context.Background(), key, got); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := reconcile(); len(got.Finalizers) == 0 {
		t.Fatal("the maintenance went while the BMC was flashing")
	}
	f.outcomes = []string{"ok"}
	if got := reconcile(); len(got.Finalizers) != 0 {
		t.Errorf("the maintenance stays once the flash ended: %s", describe(got))
	}
}

// BMCs echo refused values in their errors: a BIOS-settings task's string values are masked before
// a message reaches the status.
func TestBMCMessagesAreMaskedOfTheTasksValues(t *testing.T) {
	m, _ := biosMaintenance(map[string]string{"AdminPassword": `"s3cret-pw"`, "BootMode": `"LegacyBios"`})
	got := scrub(`The value "s3cret-pw" for AdminPassword is invalid; LegacyBios needs CSM`, m.Spec.Tasks[0])
	if strings.Contains(got, "s3cret-pw") || strings.Contains(got, "LegacyBios") || !strings.Contains(got, "AdminPassword") {
		t.Errorf("masked message %q", got)
	}
}

// A maintenance whose BIOS settings the BMC refuses stays Pending; the BMC is asked again only
// when the spec changes, and a corrected spec goes on.
func TestRefusedTasksAreCheckedAgainOnlyWhenCorrected(t *testing.T) {
	f := &refusingBMC{}
	m, host := biosMaintenance(map[string]string{"Turbo": `"On"`})
	m.Status.Stage, m.Generation = expv1.StagePending, 1
	c := apiWorld(t, host)
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now,
		Connect: func(context.Context, *infrav1.RedfishHost) (BMC, error) { return f, nil }}
	for range 3 {
		if ok, _ := r.checkTasks(context.Background(), m, host); ok {
			t.Fatal("refused attributes passed")
		}
	}
	if f.checks != 1 || m.Status.Stage != expv1.StagePending || conditions.GetReason(m, infrav1.ReadyCondition) != InvalidTaskReason {
		t.Fatalf("%d checks, stage %s, %s: want one check, Pending, InvalidTask", f.checks, m.Status.Stage, describe(m))
	}
	m.Spec.Tasks[0].BIOSSettings.Attributes = map[string]apiextensionsv1.JSON{"BootMode": {Raw: []byte(`"Uefi"`)}}
	m.Generation = 2
	if ok, _ := r.checkTasks(context.Background(), m, host); !ok || f.checks != 2 {
		t.Errorf("corrected spec: ok %v after %d checks (%s)", ok, f.checks, describe(m))
	}
}

type refusingBMC struct {
	fakeBMC
	checks int
}

func (f *refusingBMC) CheckBIOSAttributes(_ context.Context, attrs map[string]any) error {
	f.checks++
	if _, ok := attrs["Turbo"]; ok {
		return &bmc.UnknownAttributesError{Problems: []string{"Turbo: unknown attribute"}}
	}
	return nil
}

// A BMC that echoes a refused value in its error: the value is masked in the task's message.
func TestAnEchoedValueIsMaskedInTheStatus(t *testing.T) {
	f := &echoingBMC{fakeBIOS: fakeBIOS{current: map[string]any{}}}
	m, host := biosMaintenance(map[string]string{"AdminPassword": `"s3cret-pw"`})
	c := apiWorld(t, host)
	now := time.Now()
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: func() time.Time { return now },
		Connect: func(context.Context, *infrav1.RedfishHost) (BMC, error) { return f, nil }}
	if _, _, err := r.runTasks(context.Background(), m, host); err != nil {
		t.Fatal(err)
	}
	msg := m.Status.Tasks[0].Message + conditions.GetMessage(m, infrav1.ReadyCondition)
	if strings.Contains(msg, "s3cret-pw") || !strings.Contains(msg, "***") {
		t.Errorf("message %q", msg)
	}
}

type echoingBMC struct{ fakeBIOS }

func (f *echoingBMC) SetBIOSAttributes(_ context.Context, attrs map[string]any) error {
	return fmt.Errorf("HTTP 400: the value %v for AdminPassword is not valid", attrs["AdminPassword"])
}

// Deleting a maintenance waits for its apply job (a boot into the BIOS setup, POST included)
// to end, even past the phase's timeout.
func TestADeletedMaintenanceWaitsOutItsBIOSSetupBoot(t *testing.T) {
	m, host := biosMaintenance(map[string]string{"BootMode": `"LegacyBios"`})
	past := metav1.NewTime(time.Now().Add(-2 * DefaultStepTimeout))
	m.Status.Tasks = []expv1.MaintenanceTaskStatus{{State: expv1.TaskRunning, Phase: expv1.PhaseApplying, Job: "m-apply", PhaseStartTime: &past, StepStartTime: &past, Attempt: 1}}
	m.Finalizers = []string{Finalizer}
	job := &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-apply"}, Spec: infrav1.RedfishJobSpec{HostName: "h"}}
	c := apiWorld(t, host, m, job)
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now,
		Connect: func(context.Context, *infrav1.RedfishHost) (BMC, error) { return &fakeBIOS{}, nil }}
	key := client.ObjectKeyFromObject(m)
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), key, m); err != nil || len(m.Finalizers) == 0 {
		t.Fatalf("the maintenance went while its job booted the host (%v)", err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	done := metav1.NowMicro()
	job.Status.CompletionTime = &done
	if err := c.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), key, m); client.IgnoreNotFound(err) != nil || (err == nil && len(m.Finalizers) != 0) {
		t.Errorf("the maintenance stays once the job ended (%v)", err)
	}
}

// spec.abort on a maintenance that has not started draining cancels it: nothing is held.
func TestAnAbortBeforeTheDrainCancels(t *testing.T) {
	m, host := biosMaintenance(map[string]string{"BootMode": `"LegacyBios"`})
	m.Status = expv1.RedfishMaintenanceStatus{Stage: expv1.StageApproved}
	m.Spec.Abort, m.Finalizers = true, []string{Finalizer}
	c := apiWorld(t, host, m)
	r := &Reconciler{Client: c, APIReader: c, PollInterval: time.Second, Now: time.Now,
		Connect: func(context.Context, *infrav1.RedfishHost) (BMC, error) { return &fakeBIOS{}, nil }}
	key := client.ObjectKeyFromObject(m)
	for range 2 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(context.Background(), key, m); err != nil || m.Status.Stage != expv1.StageCancelled || conditions.GetReason(m, infrav1.ReadyCondition) != AbortedReason {
		t.Fatalf("stage %s, %s (%v): want Cancelled, Aborted", m.Status.Stage, describe(m), err)
	}
	h := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(host), h); err != nil || len(h.Spec.RebootRequests) != 0 {
		t.Errorf("host reboot requests %+v (%v): want none", h.Spec.RebootRequests, err)
	}
}

// A maintenance round on a cache behind the controller's own last write of it writes nothing and
// reads nothing from the API server (a copy a write behind would count a task's attempt twice)
// and comes back after PollInterval; the write's own event wakes it sooner.
func TestAMaintenanceRoundOnACacheBehindItsOwnLastWriteWaitsForIt(t *testing.T) {
	host := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}
	m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", Finalizers: []string{Finalizer}},
		Spec: expv1.RedfishMaintenanceSpec{HostName: "h", Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}}}
	api, cache := apiWorld(t, host.DeepCopy(), m.DeepCopy()), apiWorld(t, host.DeepCopy(), m.DeepCopy())
	r := &Reconciler{PollInterval: time.Second, Now: time.Now}
	r.fresh = &fresh.Reads{Kind: expv1.GroupVersion.WithKind("RedfishMaintenance")}
	written := &expv1.RedfishMaintenance{}
	if err := api.Get(t.Context(), client.ObjectKeyFromObject(m), written); err != nil {
		t.Fatal(err)
	}
	written.Status.Stage = expv1.StagePending // the controller's last write, not cached yet
	if err := r.fresh.Client(api).Status().Update(t.Context(), written); err != nil {
		t.Fatal(err)
	}
	reads := &apireads.Counter{Reader: api}
	r.Client, r.APIReader = r.fresh.Client(cache), reads
	res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)})
	after := &expv1.RedfishMaintenance{}
	if gerr := api.Get(t.Context(), client.ObjectKeyFromObject(m), after); gerr != nil {
		t.Fatal(gerr)
	}
	if err != nil || res.RequeueAfter != r.PollInterval || reads.Gets != 0 || after.ResourceVersion != written.ResourceVersion {
		t.Errorf("round on a cache behind: %v, %+v, %d API reads, resourceVersion %s → %s; want nothing done, back in PollInterval",
			err, res, reads.Gets, written.ResourceVersion, after.ResourceVersion)
	}
}

// The gate's decision to start a maintenance is taken under its lock from the cache once the
// cache holds every start this controller wrote, without a read of the API server (which cost
// every start about 0.3 s at N = 100, and serialised the starts of a wave behind the lock); while
// the cache misses one, from the API server, so two maintenances never take one place.
func TestTheGateDecidesFromTheCacheOnceItHoldsEveryStartItWrote(t *testing.T) {
	host := func(name string) *infrav1.RedfishHost {
		h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		h.Status.State = infrav1.HostStateAvailable
		h.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason}}
		return h
	}
	// m-b starts first; m-a, created after, is first in line by name.
	maint := func(name, hostName string) *expv1.RedfishMaintenance {
		m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Finalizers: []string{Finalizer}},
			Spec: expv1.RedfishMaintenanceSpec{HostName: hostName, Policy: expv1.Enforced, Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}}}
		m.Status.Stage, m.Status.ApprovedBy = expv1.StageApproved, "Unclaimed"
		return m
	}
	stage := func(c client.Client, name string) expv1.MaintenanceStage {
		t.Helper()
		m := &expv1.RedfishMaintenance{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: name}, m); err != nil {
			t.Fatal(err)
		}
		return m.Status.Stage
	}
	for _, c := range []struct {
		name           string
		maxUnavailable int32
		cacheHasStart  bool
		lostAnswer     bool          // the first start's write is applied, its answer lost
		later          time.Duration // between the first start and the second decision
		newLeader      bool          // another controller (a leader since gone) wrote the first start
		wantStarted    bool
		wantAPILists   string // "none", "seed" (the versions a new leader takes, one list), "decision"
	}{
		{"room for both, the cache holds the first start: started, decided from the cache", 2, true, false, 0, false, true, "none"},
		{"room for one, the cache misses the first start: waits, decided from the API server", 1, false, false, 0, false, false, "decision"},
		{"room for one, the first start's answer lost and the cache behind: waits, decided from the API server", 1, false, true, 0, false, false, "decision"},
		{"the same, past fresh.Patience: the start settled from the API server, still waits", 1, false, true, fresh.Patience + time.Second, false, false, "decision"},
		{"room for one, a new leader whose cache misses the old leader's last start: waits, decided from the API server", 1, false, false, 0, true, false, "decision"},
		{"room for both, a new leader whose cache is current: started, decided from the cache once the versions are taken", 2, true, false, 0, true, true, "seed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			budget := intstr.FromInt32(c.maxUnavailable)
			policy := &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &budget}}
			api, stale := apiWorld(t, host("h1"), host("h2"), policy.DeepCopy(), maint("m-b", "h1")), apiWorld(t, host("h1"), host("h2"), policy.DeepCopy(), maint("m-b", "h1"))
			now := time.Now()
			r := &Reconciler{PollInterval: time.Second, Now: func() time.Time { return now }}
			r.fresh = &fresh.Reads{Kind: expv1.GroupVersion.WithKind("RedfishMaintenance")}
			r.Client, r.APIReader = r.fresh.Client(api), api
			first := r
			if c.newLeader {
				r = &Reconciler{PollInterval: time.Second, Now: func() time.Time { return now }}
				r.fresh = &fresh.Reads{Kind: expv1.GroupVersion.WithKind("RedfishMaintenance")}
			}
			if c.lostAnswer {
				first.Client = first.fresh.Client(lostAnswers{api})
			}
			// The start is written under the gate's lock, and the round writes nothing after it
			// (TestTheRoundThatStartsAMaintenanceWritesItOnce counts the writes).
			if _, err := first.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "m-b"}}); err != nil &&
				(!c.lostAnswer || !apierrors.IsTimeout(err)) {
				t.Fatal(err)
			}
			now = now.Add(c.later)
			if got := stage(api, "m-b"); got != expv1.StageDraining {
				t.Fatalf("the first maintenance is %s, want Draining", got)
			}
			// A start whose answer was lost is not followed by the round's own write: its status
			// carries the conditions whole, and would put those from before the gate beside
			// the Draining stage.
			written := &expv1.RedfishMaintenance{}
			if err := api.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "m-b"}, written); err != nil {
				t.Fatal(err)
			}
			if reason := conditions.GetReason(written, infrav1.ReadyCondition); reason != DrainingReason {
				t.Errorf("the started maintenance's Ready reason %q, want %s", reason, DrainingReason)
			}
			for _, w := range []client.Client{api, stale} {
				if err := w.Create(t.Context(), maint("m-a", "h2")); err != nil {
					t.Fatal(err)
				}
			}
			cache := client.Reader(api)
			if !c.cacheHasStart {
				cache = stale // still shows m-b Approved
			}
			reads := &apireads.Counter{Reader: api}
			r.Client, r.APIReader = r.fresh.Client(cacheClient{Client: api, Reader: cache}), reads
			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "m-a"}}); err != nil {
				t.Fatal(err)
			}
			if started := stage(api, "m-a") == expv1.StageDraining; started != c.wantStarted {
				t.Errorf("the second maintenance started: %t, want %t", started, c.wantStarted)
			}
			if got := map[bool]string{true: "none"}[reads.Lists == 0] + map[bool]string{true: "seed"}[reads.Lists == 1] + map[bool]string{true: "decision"}[reads.Lists > 1]; got != c.wantAPILists {
				t.Errorf("%d lists from the API server (%s), want %s", reads.Lists, got, c.wantAPILists)
			}
		})
	}
}

// Only a failed write that may have been applied keeps the gate on the API server: a timeout, a
// server error, a broken connection; not a refusal.
func TestOnlyAWriteThatMayHaveBeenAppliedIsOfUnknownOutcome(t *testing.T) {
	gr := expv1.GroupVersion.WithResource("redfishmaintenances").GroupResource()
	for err, want := range map[error]bool{
		apierrors.NewTimeoutError("slow", 1):                                                          true,
		apierrors.NewServerTimeout(gr, "update", 1):                                                   true,
		apierrors.NewServiceUnavailable("restarting"):                                                 true,
		apierrors.NewInternalError(errors.New("etcd")):                                                true,
		fmt.Errorf("put: %w", io.ErrUnexpectedEOF):                                                    true,
		apierrors.NewInvalid(expv1.GroupVersion.WithKind("RedfishMaintenance").GroupKind(), "m", nil): false,
		apierrors.NewForbidden(gr, "m", errors.New("rbac")):                                           false,
		apierrors.NewTooManyRequests("later", 1):                                                      false,
	} {
		if got := unknownOutcome(err); got != want {
			t.Errorf("%v: unknown outcome %t, want %t", err, got, want)
		}
	}
}

// lostAnswers applies every status update and answers it with a timeout.
type lostAnswers struct{ client.Client }

func (c lostAnswers) Status() client.SubResourceWriter { return lostStatus{c.Client.Status()} }

type lostStatus struct{ client.SubResourceWriter }

func (s lostStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.SubResourceWriter.Update(ctx, obj, opts...); err != nil {
		return err
	}
	return apierrors.NewTimeoutError("the answer was lost", 1)
}

// cacheClient reads from Reader and writes through Client.
type cacheClient struct {
	client.Client
	Reader client.Reader
}

func (c cacheClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c cacheClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.Reader.List(ctx, list, opts...)
}

// statusWrites counts the status writes a client makes.
type statusWrites struct {
	client.Client
	n *int
}

func (c statusWrites) Status() client.SubResourceWriter {
	return countedStatus{SubResourceWriter: c.Client.Status(), n: c.n}
}

type countedStatus struct {
	client.SubResourceWriter
	n *int
}

func (s countedStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	*s.n++
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s countedStatus) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	*s.n++
	return s.SubResourceWriter.Patch(ctx, obj, p, opts...)
}

// readyHostAndEnforcedHold is a Ready, Available host h and an Enforced powerOffAndHold maintenance
// m of it, its finalizer stored.
func readyHostAndEnforcedHold() (*infrav1.RedfishHost, *expv1.RedfishMaintenance) {
	host := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}}
	host.Status.State = infrav1.HostStateAvailable
	host.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason}}
	m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", Finalizers: []string{Finalizer}},
		Spec: expv1.RedfishMaintenanceSpec{HostName: "h", Policy: expv1.Enforced, Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}}}
	return host, m
}

// The round that starts a maintenance stores it once, with the gate's write. Its end patched the
// same status again from the copy read before: a second write, and a conditions patch that read
// the cache (still without the start), conflicted and slept 100–200 ms before each retry, while
// the round that deletes the Machine waited for it (about 0.1 s of every wave at N = 100).
func TestTheRoundThatStartsAMaintenanceWritesItOnce(t *testing.T) {
	host, m := readyHostAndEnforcedHold()
	m.Status.Stage, m.Status.ApprovedBy = expv1.StageApproved, "Unclaimed"
	one := intstr.FromInt32(1)
	policy := &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &one}}
	// The cache never sees the round's write: it is a moment behind, as a watch is.
	api, cache := apiWorld(t, host.DeepCopy(), m.DeepCopy(), policy.DeepCopy()), apiWorld(t, host.DeepCopy(), m.DeepCopy(), policy.DeepCopy())
	writes := 0
	r := &Reconciler{PollInterval: time.Second, Now: time.Now}
	r.fresh = &fresh.Reads{Kind: expv1.GroupVersion.WithKind("RedfishMaintenance")}
	r.Client, r.APIReader = r.fresh.Client(cacheClient{Client: statusWrites{Client: api, n: &writes}, Reader: cache}), api
	start := time.Now()
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)}); err != nil {
		t.Fatalf("the start round: %v", err)
	}
	took := time.Since(start)
	got := &expv1.RedfishMaintenance{}
	if err := api.Get(t.Context(), client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Stage != expv1.StageDraining || writes != 1 {
		t.Errorf("after the start round: stage %s, %d status writes (%s); want Draining, written once", got.Status.Stage, writes, took)
	}
}

// A round that moves a maintenance on writes its stage and its conditions in one status write
// (internal/onepatch): CAPI's patch helper wrote the conditions apart, a second update for the
// API server and a second event for every watcher per stage.
func TestAStageAndItsConditionsAreOneWrite(t *testing.T) {
	host, m := readyHostAndEnforcedHold()
	api := apiWorld(t, host, m)
	writes := 0
	r := &Reconciler{Client: statusWrites{Client: api, n: &writes}, APIReader: api, PollInterval: time.Second, Now: time.Now}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)}); err != nil {
		t.Fatalf("the first round: %v", err)
	}
	got := &expv1.RedfishMaintenance{}
	if err := api.Get(t.Context(), client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Stage == "" || len(got.Status.Conditions) == 0 || writes != 1 {
		t.Errorf("after the first round: stage %q, conditions %v, %d status writes; want a stage and its conditions, written once", got.Status.Stage, got.Status.Conditions, writes)
	}
	// A condition type the controller does not list as its own would send every round's write
	// through CAPI's patch helper, a read and up to three writes (onepatch.Helper.Owning).
	for _, c := range got.Status.Conditions {
		if !slices.Contains(ownedConditions, c.Type) {
			t.Errorf("the round set condition %s, not in ownedConditions %v", c.Type, ownedConditions)
		}
	}
}
