package job

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/controllers/host"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/apireads"
	"github.com/caprf/cluster-api-provider-redfish/internal/fresh"
)

// world is a fake API server with hosts, jobs and maintenances, and a job reconciler on it whose
// BMC records what it is sent.
func world(t *testing.T, objs ...client.Object) (*Reconciler, client.Client, *scriptedBMC) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&infrav1.RedfishJob{}, &infrav1.RedfishHost{}, &expv1.RedfishMaintenance{}).
		WithIndex(&infrav1.RedfishJob{}, host.JobHostIndex, host.IndexJobHost).WithIndex(&infrav1.RedfishJob{}, HostField, host.IndexJobHost).Build()
	b := &scriptedBMC{states: []bmc.PowerState{bmc.PowerOff}}
	r := &Reconciler{Client: c, APIReader: c, PollInterval: 2 * time.Second, Now: time.Now,
		Connect: func(context.Context, *infrav1.RedfishHost) (host.BMC, error) { return b, nil }}
	return r, c, b
}

func availableHost(name string) *infrav1.RedfishHost {
	h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	h.Status.State = infrav1.HostStateAvailable
	return h
}

func onJob(name, hostName string) *infrav1.RedfishJob {
	return &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: infrav1.RedfishJobSpec{HostName: hostName, Tasks: []infrav1.JobTask{{Power: infrav1.JobPowerOn}}}}
}

func reconcileJob(t *testing.T, r *Reconciler, c client.Client, name string) *infrav1.RedfishJob {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: name}}); err != nil {
		t.Fatal(err)
	}
	j := &infrav1.RedfishJob{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, j); err != nil {
		t.Fatal(err)
	}
	return j
}

// Two jobs of one host that both started (each from a cache without the other's start): before
// its first task each confirms from the API server, and the one that started later goes back to
// waiting; nothing reaches the BMC for it.
func TestOfTwoJobsStartedAtOnceTheFirstKeepsTheHost(t *testing.T) {
	early, late := onJob("b-early", "h"), onJob("a-late", "h")
	t0 := time.Now().Add(-time.Second)
	for i, j := range []*infrav1.RedfishJob{early, late} {
		at := metav1.NewMicroTime(t0.Add(time.Duration(i) * time.Millisecond))
		j.Status.StartTime = &at
		j.Status.Tasks = []infrav1.JobTaskStatus{{State: infrav1.JobTaskPending}}
	}
	r, c, b := world(t, availableHost("h"), early, late)
	got := reconcileJob(t, r, c, "a-late")
	if got.Status.StartTime != nil || b.tried != 0 {
		t.Fatalf("the later job kept its start (%v) or sent %d resets", got.Status.StartTime, b.tried)
	}
	if cond := conditions.Get(got, infrav1.JobRunningCondition); cond == nil || cond.Reason != infrav1.JobWaitingForJobReason {
		t.Errorf("later job: %+v, want waiting for b-early (status %+v)", cond, got.Status)
	}
	got = reconcileJob(t, r, c, "b-early")
	if got.Status.Tasks[0].State == infrav1.JobTaskPending || b.tried != 1 {
		t.Errorf("the earlier job did not run: %+v, %d resets", got.Status.Tasks, b.tried)
	}
}

// A host claimed between a job's start and its first task fails the job (HostInUse) without a
// BMC request, unless a maintenance that took the Machine off has the host in stage
// InMaintenance (a BMC-firmware-only maintenance leaves the Machine running: it does not count).
func TestAJobOnAClaimedHostFailsUnlessTheHostIsInMaintenance(t *testing.T) {
	const bmcOnly = expv1.MaintenanceStage("InMaintenance, BMC firmware only")
	for _, stage := range []expv1.MaintenanceStage{"", expv1.StageApproved, expv1.StageInMaintenance, bmcOnly} {
		h := availableHost("h")
		h.Status.State = infrav1.HostStateProvisioned
		h.Status.Claim = &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Namespace: "ns", Name: "m1"}}
		j := onJob("j", "h")
		at := metav1.NowMicro()
		j.Status.StartTime, j.Status.Tasks = &at, []infrav1.JobTaskStatus{{State: infrav1.JobTaskPending}}
		objs := []client.Object{h, j}
		switch stage {
		case "":
		case bmcOnly:
			objs = append(objs, &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bmc"},
				Spec:   expv1.RedfishMaintenanceSpec{HostName: "h", Tasks: []expv1.MaintenanceTask{{Firmware: &expv1.FirmwareUpdate{Component: expv1.FirmwareBMC}}}},
				Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageInMaintenance}})
		default:
			objs = append(objs, &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bios"},
				Spec: expv1.RedfishMaintenanceSpec{HostName: "h"}, Status: expv1.RedfishMaintenanceStatus{Stage: stage}})
		}
		r, c, b := world(t, objs...)
		got := reconcileJob(t, r, c, "j")
		failed := conditions.Get(got, infrav1.JobFailedCondition)
		if stage == expv1.StageInMaintenance {
			if failed != nil && failed.Status == metav1.ConditionTrue || b.tried != 1 {
				t.Errorf("in maintenance: failed %+v, %d resets; want it run", failed, b.tried)
			}
			continue
		}
		if failed == nil || failed.Reason != infrav1.JobHostInUseReason || b.tried != 0 {
			t.Errorf("maintenance stage %q: failed %+v, %d resets; want HostInUse and nothing sent", stage, failed, b.tried)
		}
	}
}

// A job waits while its host is being released (Provisioned, its claim released or gone): the
// host controller powers it off and starts its erase in the round that reads the release, and
// a job confirmed from the API server in that moment would act on the BMC at the same time.
func TestAJobWaitsForAHostBeingReleased(t *testing.T) {
	releasing := &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Namespace: "ns", Name: "m1"}, Release: true}
	for _, tc := range []struct {
		state    infrav1.HostState
		released *infrav1.HostClaim
	}{
		{infrav1.HostStateProvisioned, releasing},
		{infrav1.HostStateProvisioned, nil},
		// Claimed and released before the host controller saw the claim: its next round powers
		// the server off and erases it.
		{infrav1.HostStateAvailable, releasing},
	} {
		released := tc.released
		h := availableHost("h")
		h.Status.State, h.Status.Claim = tc.state, released
		j := onJob("j", "h")
		at := metav1.NowMicro()
		j.Status.StartTime, j.Status.Tasks = &at, []infrav1.JobTaskStatus{{State: infrav1.JobTaskPending}}
		r, c, b := world(t, h, j)
		got := reconcileJob(t, r, c, "j")
		cond := conditions.Get(got, infrav1.JobRunningCondition)
		if b.tried != 0 || got.Status.StartTime != nil || cond == nil || cond.Reason != infrav1.JobWaitingForHostReason {
			t.Errorf("%s, claim %+v: %d resets, start %v, %+v; want nothing sent, back to waiting for the host", tc.state, released, b.tried, got.Status.StartTime, cond)
		}
	}
}

// A job round on a cache behind the controller's own last write of the job does nothing (no BMC
// call, no API read, no error: a copy a write behind would start a task again) and comes back
// after PollInterval; the write's own event wakes it sooner.
func TestAJobRoundOnACacheBehindItsOwnLastWriteWaitsForIt(t *testing.T) {
	r, api, b := world(t, availableHost("h"), onJob("j", "h"))
	cached := &infrav1.RedfishJob{}
	if err := api.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "j"}, cached); err != nil {
		t.Fatal(err)
	}
	cache := fake.NewClientBuilder().WithScheme(api.Scheme()).WithObjects(cached.DeepCopy(), availableHost("h")).
		WithIndex(&infrav1.RedfishJob{}, host.JobHostIndex, host.IndexJobHost).WithIndex(&infrav1.RedfishJob{}, HostField, host.IndexJobHost).Build()
	r.fresh = &fresh.Reads{Kind: infrav1.GroupVersion.WithKind("RedfishJob")}
	written := cached.DeepCopy()
	written.Status.StartTime = ptr.To(metav1.NowMicro()) // the controller's last write, not cached yet
	if err := r.fresh.Client(api).Status().Update(t.Context(), written); err != nil {
		t.Fatal(err)
	}
	reads := &apireads.Counter{Reader: api}
	r.Client, r.APIReader = r.fresh.Client(cache), reads
	res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "j"}})
	if err != nil || res.RequeueAfter != r.PollInterval || len(b.resets) != 0 || reads.Gets != 0 {
		t.Errorf("round on a cache behind: %v, %+v, resets %v, %d API reads; want nothing done, back in PollInterval", err, res, b.resets, reads.Gets)
	}
}

// A job's end (its completion time and its outcome) is written whole or not at all: a maintenance
// waits for the Completed or Failed condition of its job, and a job with a completion time is
// never run again, so an end written without its outcome (a conditions write that failed while
// the rest of the status landed, seen under API-server faults) left the maintenance waiting for
// ever. Here the first status write carrying the end fails; the job must still end Completed,
// with its power action sent once.
func TestAJobsEndIsWrittenWholeOrNotAtAll(t *testing.T) {
	r, api, b := world(t, availableHost("h"), onJob("j", "h"))
	b.states = []bmc.PowerState{bmc.PowerOff, bmc.PowerOff, bmc.PowerOn}
	failed := false
	r.Client = interceptor.NewClient(api.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			data, err := p.Data(obj)
			if err != nil {
				return err
			}
			if !failed && endsTheJob(data) {
				failed = true
				return errors.New("etcdserver: request timed out")
			}
			return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	j := &infrav1.RedfishJob{}
	for range 20 {
		_, _ = r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "j"}})
		if err := api.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "j"}, j); err != nil {
			t.Fatal(err)
		}
		if j.Finished() && conditions.IsTrue(j, infrav1.JobCompletedCondition) {
			break
		}
	}
	if !failed {
		t.Fatal("no status write carried the job's end")
	}
	if !j.Finished() || !conditions.IsTrue(j, infrav1.JobCompletedCondition) {
		t.Errorf("the job ended with completion time %v and conditions %+v; want both its end and Completed", j.Status.CompletionTime, j.Status.Conditions)
	}
	if len(b.resets) != 1 {
		t.Errorf("power actions sent: %v, want one", b.resets)
	}
}

// endsTheJob says whether a status patch carries the job's end: its completion time, or a True
// Completed condition (not a task's completion time).
func endsTheJob(patch []byte) bool {
	var body struct {
		Status struct {
			CompletionTime *metav1.MicroTime  `json:"completionTime"`
			Conditions     []metav1.Condition `json:"conditions"`
		} `json:"status"`
	}
	if json.Unmarshal(patch, &body) != nil {
		return false
	}
	return body.Status.CompletionTime != nil || slices.ContainsFunc(body.Status.Conditions, func(c metav1.Condition) bool {
		return c.Type == infrav1.JobCompletedCondition && c.Status == metav1.ConditionTrue
	})
}

// A job that ended without its outcome (written apart by an earlier round, or by a version before
// the job's status was one write) is given the outcome its tasks tell, without a BMC request and
// with its completion time kept.
func TestAJobThatEndedWithoutItsOutcomeIsGivenIt(t *testing.T) {
	end := metav1.NewMicroTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	for _, tc := range []struct {
		name  string
		state infrav1.JobTaskState
		want  string
	}{
		{"its tasks succeeded", infrav1.JobTaskSucceeded, infrav1.JobCompletedCondition},
		{"a task failed", infrav1.JobTaskFailed, infrav1.JobFailedCondition},
		{"its tasks unfinished", infrav1.JobTaskRunning, infrav1.JobFailedCondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := onJob("j", "h")
			j.Status.StartTime = ptr.To(metav1.NewMicroTime(end.Add(-time.Minute)))
			j.Status.CompletionTime = &end
			j.Status.Tasks = []infrav1.JobTaskStatus{{State: tc.state}}
			j.Status.Conditions = []metav1.Condition{{Type: infrav1.JobRunningCondition, Status: metav1.ConditionTrue, Reason: infrav1.JobRunningReason, LastTransitionTime: metav1.NewTime(end.Time)}}
			r, c, b := world(t, availableHost("h"), j)
			got := reconcileJob(t, r, c, "j")
			if !conditions.IsTrue(got, tc.want) || conditions.IsTrue(got, infrav1.JobRunningCondition) {
				t.Errorf("conditions %+v, want %s True and Running not", got.Status.Conditions, tc.want)
			}
			if !got.Status.CompletionTime.Equal(&end) {
				t.Errorf("completion time %v, want %v kept", got.Status.CompletionTime, end)
			}
			if b.tried != 0 || len(b.resets) != 0 {
				t.Errorf("the BMC was sent %d resets", b.tried)
			}
		})
	}
}
