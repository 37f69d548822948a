package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// JobFigures describe a RedfishJob phase: N jobs (power On; or a power cycle: ForceOff, then On),
// one per host, all at once.
type JobFigures struct {
	Jobs        int `json:"jobs"`
	Failed      int `json:"failed"`
	Concurrency int `json:"concurrency"`
	// RedfishPerJob is the phase's Redfish requests (the host controller's included) per job.
	RedfishPerJob float64 `json:"redfishPerJob"`
	// SessionsPerBMCMax is the most sessions one BMC saw opened during the phase.
	SessionsPerBMCMax int `json:"sessionsPerBMCMax"`
	// DuplicatedResets counts the servers that accepted more than one ForceOff or On in the phase.
	DuplicatedResets int `json:"duplicatedResets"`
	// JobSeconds: each job's own time, creation to completion (median, p95, max).
	JobSeconds stat `json:"jobSeconds"`
}

// jobsAtConcurrency is the second job phase's --concurrency: the "and at 10".
const jobsAtConcurrency = 10

// jobs powers the N registered hosts on with one job each (they register powered off), runs N
// power-cycle RedfishJobs at once at the manager's concurrency, then restarts the manager at
// --concurrency 10 and runs them again.
func (r *run) jobs(ctx context.Context) error {
	on := []infrav1.JobTask{{Power: infrav1.JobPowerOn}}
	cycle := []infrav1.JobTask{{Power: infrav1.JobPowerForceOff}, {Power: infrav1.JobPowerOn}}
	if err := r.jobPhase(ctx, "power-on", on, 1); err != nil {
		return err
	}
	if err := r.jobPhase(ctx, "jobs", cycle, 2); err != nil {
		return err
	}
	r.printf("restarting the manager at --concurrency %d", jobsAtConcurrency)
	if err := r.mgr.stop(); err != nil {
		return err
	}
	sessions := make([]int, len(r.fleet.Servers))
	for i, s := range r.fleet.Servers {
		sessions[i] = s.Stats().SessionsCreated
	}
	o := r.o
	o.Concurrency = jobsAtConcurrency
	var err error
	if r.mgr, err = startManager(ctx, r.env, r.bin, r.o.Dir, o); err != nil {
		return err
	}
	// Not measured: the new manager connecting to every BMC (a session each) and reading every
	// host once. The phase starts when every BMC has its new session and the fleet is quiet.
	last := -1
	if err := until(ctx, 5*time.Minute, func(context.Context) (bool, error) {
		total := 0
		for i, s := range r.fleet.Servers {
			st := s.Stats()
			if st.SessionsCreated == sessions[i] {
				return false, nil
			}
			for _, n := range st.Requests {
				total += n
			}
		}
		quiet := total == last
		last = total
		return quiet, nil
	}); err != nil {
		return fmt.Errorf("the restarted manager did not connect to every BMC: %w", err)
	}
	return r.jobPhase(ctx, fmt.Sprintf("jobs-c%d", jobsAtConcurrency), cycle, 2)
}

func (r *run) jobPhase(ctx context.Context, name string, tasks []infrav1.JobTask, transitions int) error {
	n := r.servers
	hosts := &infrav1.RedfishHostList{}
	if err := r.cache.List(ctx, hosts, client.InNamespace(namespace)); err != nil {
		return err
	}
	if len(hosts.Items) != n {
		return fmt.Errorf("%s: %d hosts registered, want %d", name, len(hosts.Items), n)
	}
	resets := make([][2]int, n)
	sessions := make([]int, n)
	for i, s := range r.fleet.Servers {
		st := s.Stats()
		resets[i] = [2]int{st.Resets["ForceOff"], st.Resets["On"]}
		sessions[i] = st.SessionsCreated
	}
	prefix := name + "-"
	created := make([]time.Time, n)
	create := func(ctx context.Context) error {
		return parallel(ctx, n, func(ctx context.Context, i int) error {
			created[i] = time.Now()
			return r.c.Create(ctx, &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: prefix + strconv.Itoa(i)},
				Spec: infrav1.RedfishJobSpec{HostName: hosts.Items[i].Name, Tasks: tasks}})
		})
	}
	// When the benchmark saw each job finished (its status times have whole seconds only).
	seen := map[string]time.Time{}
	failed := 0
	done := func(ctx context.Context) (bool, error) {
		list := &infrav1.RedfishJobList{}
		if err := r.cache.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		for _, j := range list.Items {
			if _, ok := seen[j.Name]; ok || !j.Finished() || !strings.HasPrefix(j.Name, prefix) {
				continue
			}
			seen[j.Name] = time.Now()
			if c := findCondition(j.Status.Conditions, infrav1.JobFailedCondition); c != nil && c.Status == metav1.ConditionTrue {
				failed++
			}
		}
		return len(seen) == n, nil
	}
	p, err := r.measure(ctx, name, n, create, done, 5*time.Minute+time.Duration(n)*100*time.Millisecond)
	if err != nil {
		return err
	}
	f := &JobFigures{Jobs: n, Failed: failed, Concurrency: r.mgr.Concurrency, RedfishPerJob: float64(p.Redfish.Total) / float64(n)}
	var ds []time.Duration
	for i := range n {
		ds = append(ds, seen[prefix+strconv.Itoa(i)].Sub(created[i]))
	}
	f.JobSeconds = summarize(ds)
	for i, s := range r.fleet.Servers {
		st := s.Stats()
		if st.Resets["ForceOff"]-resets[i][0] > 1 || st.Resets["On"]-resets[i][1] > 1 {
			f.DuplicatedResets++
		}
		f.SessionsPerBMCMax = max(f.SessionsPerBMCMax, st.SessionsCreated-sessions[i])
	}
	p.Jobs = f
	p.setFloor(time.Duration(transitions)*r.o.PowerLatency, fmt.Sprintf("%d power transitions, every host at once", transitions))
	return nil
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
