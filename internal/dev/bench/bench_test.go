package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The benchmark at a small N, so that `make bench` never rots: every phase completes on the real
// manager binary, no phase beats the floor it is measured against (a ratio under 1 would mean the
// floor is not a floor), the per-machine split covers every Machine, the figures survive JSON, and
// the targets a small fleet can check hold: an idle manager writes nothing and polls its BMCs only
// at the resync, one Redfish session per BMC for the whole run, no reconcile error in its log.
func TestBenchmarkSmallFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	const hosts = 4
	idle, check := 25*time.Second, 10*time.Second
	dir := t.TempDir()
	var out bytes.Buffer
	report, err := Run(t.Context(), Options{
		Hosts: hosts, PowerLatency: 300 * time.Millisecond, BootTime: 500 * time.Millisecond, RequestLatency: 5 * time.Millisecond,
		Idle: idle, BMCCheckInterval: check, TaskTime: time.Second, Dir: dir, Out: &out,
	})
	if report != nil {
		report.WriteTable(&out)
	}
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}

	names := []string{}
	for _, p := range report.Phases {
		names = append(names, p.Name)
		if p.FloorSeconds > 0 && p.Ratio < 1 {
			t.Errorf("%s took %.2fs, under its floor %.2fs (%s): the floor model is wrong", p.Name, p.WallSeconds, p.FloorSeconds, p.FloorModel)
		}
		if p.Name != "idle" && (p.FloorSeconds <= 0 || p.CPUSeconds <= 0 || p.KubeTotal <= 0 || p.Redfish.Total <= 0) {
			t.Errorf("%s: floor %.2fs, CPU %.2fs, %v API requests, %d Redfish requests: a figure is missing", p.Name, p.FloorSeconds, p.CPUSeconds, p.KubeTotal, p.Redfish.Total)
		}
	}
	if want := []string{"register", "provision", "rollout", "idle", "maintenance"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("phases %v, want %v", names, want)
	}
	provision, rollout, idlePhase, maint := report.Phases[1], report.Phases[2], report.Phases[3], report.Phases[4]
	if provision.Split == nil || provision.Split.Machines != hosts+1 {
		t.Errorf("provision split %+v, want %d machines (the workers and the control plane)", provision.Split, hosts+1)
	}
	if rollout.Split == nil || rollout.Split.Machines != hosts || rollout.Split.Deleted != hosts {
		t.Errorf("rollout split %+v, want %d machines created and %d deleted", rollout.Split, hosts, hosts)
	}
	if s := rollout.Split; s != nil {
		if s.Provider.Median < (300*time.Millisecond + 500*time.Millisecond).Seconds() {
			t.Errorf("a replacement's provider part took %.2fs, under the power-on and boot it includes", s.Provider.Median)
		}
		// Woken, not polled: a machine notices its Node joining, and a machine being deleted its
		// host's release, within seconds, not at their 30-s safety rechecks.
		if s.NodeToRunning.Max > 10 {
			t.Errorf("a Machine took up to %.1fs from its Node joining to Running: the Node's arrival did not wake its machine", s.NodeToRunning.Max)
		}
		if s.Deletion.Max > 20 {
			t.Errorf("a Machine's deletion took up to %.1fs: its host's release did not wake the machine", s.Deletion.Max)
		}
	}

	if mf := maint.Maintenance; mf == nil || mf.Hosts != hosts || mf.PeakInMaintenance < 1 || mf.PeakInMaintenance > mf.MaxUnavailable {
		t.Errorf("maintenance %+v: want all %d hosts maintained, never more than maxUnavailable at once", mf, hosts)
	}
	// The phase is the first start, the waves and the tail, each within the phase's wall time.
	if mf := maint.Maintenance; mf == nil || mf.Stages == nil {
		t.Error("no maintenance stages")
	} else if st := mf.Stages; st.FirstStartSeconds == nil || st.TailSeconds == nil || *st.FirstStartSeconds <= 0 || *st.TailSeconds < 0 ||
		*st.FirstStartSeconds+*st.TailSeconds >= maint.WallSeconds {
		t.Errorf("maintenance stages %+v of a %.1fs phase: want its first start and tail within it", st, maint.WallSeconds)
	} else if st.ToMachineDeletion.Median <= 0 || st.ReleasedToInMaintenance.Median <= 0 ||
		st.ToMachineDeletion.Max+st.ReleasedToInMaintenance.Max >= maint.WallSeconds {
		t.Errorf("maintenance stages %+v: want the maintenance's own rounds (Draining → Machine deletion, released → InMaintenance) measured, each within the phase", st)
	}
	if s := maint.Split; s == nil || s.Deleted != hosts || s.Machines != hosts {
		t.Errorf("maintenance split %+v: want each of the %d maintained hosts' Machines replaced", s, hosts)
	}
	// A maintenance waiting for the budget reads the fleet from the cache; only a gate it passes
	// is confirmed from the API server (and each released host is listed once more by the
	// deletion of its Machine): polling the API server while waiting would read every host of
	// the namespace every PollInterval for every waiting maintenance.
	if n := maint.KubeRequests["list redfishhosts"] + maint.KubeRequests["list redfishmaintenances"]; n > 6*hosts {
		t.Errorf("the maintenance of %d hosts listed hosts and maintenances from the API server %.0f times, more than %d: waiting maintenances poll the API server (%v)",
			hosts, n, 6*hosts, maint.KubeRequests)
	}
	if i := idlePhase.Idle; i == nil || i.APIWritesPerMinute != 0 {
		t.Errorf("an idle manager wrote to the API server: %+v (%v)", i, idlePhase.KubeRequests)
	}
	// A host's resync reads the host from the cache: the API server is asked only when the cache
	// has not yet seen the host's last write.
	if n := idlePhase.KubeRequests["get redfishhosts"]; n > 0 {
		t.Errorf("an idle manager read hosts from the API server %.0f times (%v)", n, idlePhase.KubeRequests)
	}
	if maxChecks := int(math.Ceil(idle.Seconds()/check.Seconds())) + 1; idlePhase.Redfish.Max > maxChecks {
		t.Errorf("an idle host got %d Redfish requests in %s, more than its %d resyncs at --bmc-check-interval %s", idlePhase.Redfish.Max, idle, maxChecks, check)
	}
	if report.Sessions.MaxPerBMC != 1 {
		t.Errorf("at most %d sessions on one BMC over the run, want 1", report.Sessions.MaxPerBMC)
	}
	if report.PeakRSSBytes <= 0 {
		t.Error("no peak memory measured")
	}

	raw, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	back := &Report{}
	if err := json.Unmarshal(raw, back); err != nil {
		t.Fatal(err)
	}
	if back.Phases[2].WallSeconds != rollout.WallSeconds || back.Phases[2].Split.Provider != rollout.Split.Provider || back.Sessions != report.Sessions {
		t.Error("the JSON report does not carry the figures")
	}

	log, err := os.ReadFile(filepath.Join(dir, "manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, "Reconciler error") {
			t.Errorf("the manager logged a reconcile error: %s", line)
		}
		// The API server warns at every write of a finalizer named without a path, as ours
		// are: one line per host and per Machine, noise that hides what matters in the log.
		if strings.Contains(line, "prefer a domain-qualified finalizer name") {
			t.Errorf("the manager logged the API server's finalizer-name warning: %s", line)
		}
	}
}

// The RedfishJob benchmark at a small N, so that `make bench-jobs` never rots: every power cycle
// completes, none fails, no server accepts a reset twice, a job costs at most 8 Redfish requests
// (the target), each manager opens at most one session per BMC, and no phase beats its
// floor (two power transitions).
func TestBenchmarkJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	const hosts = 4
	dir := t.TempDir()
	var out bytes.Buffer
	report, err := Run(t.Context(), Options{Jobs: hosts, PowerLatency: 300 * time.Millisecond, RequestLatency: 5 * time.Millisecond, Dir: dir, Out: &out})
	if report != nil {
		report.WriteTable(&out)
	}
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range report.Phases {
		names = append(names, p.Name)
	}
	if want := []string{"register", "power-on", "jobs", "jobs-c10"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("phases %v, want %v", names, want)
	}
	for _, p := range report.Phases[1:] {
		f := p.Jobs
		if f == nil {
			t.Fatalf("%s: no job figures", p.Name)
		}
		if f.Jobs != hosts || f.Failed != 0 || f.DuplicatedResets != 0 {
			t.Errorf("%s: %+v: want %d jobs, none failed, no duplicated reset", p.Name, f, hosts)
		}
		if f.RedfishPerJob > 8 {
			t.Errorf("%s: %.1f Redfish requests per job, more than 8", p.Name, f.RedfishPerJob)
		}
		if f.SessionsPerBMCMax > 1 {
			t.Errorf("%s: %d sessions opened on one BMC, want at most 1 per manager", p.Name, f.SessionsPerBMCMax)
		}
		if p.Ratio < 1 {
			t.Errorf("%s took %.2fs, under its floor %.2fs", p.Name, p.WallSeconds, p.FloorSeconds)
		}
	}
	if c := report.Phases[3].Jobs.Concurrency; c != 10 {
		t.Errorf("the second job phase ran at --concurrency %d, want 10", c)
	}
	log, err := os.ReadFile(filepath.Join(dir, "manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, "Reconciler error") {
			t.Errorf("the manager logged a reconcile error: %s", line)
		}
	}
}
