package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run measured; it prints as a table (WriteTable) and marshals to JSON.
type Report struct {
	Options  ReportOptions `json:"options"`
	Phases   []*Phase      `json:"phases"`
	Sessions struct {
		// Total Redfish sessions the manager opened, over every BMC and the whole run.
		Total int `json:"total"`
		// MaxPerBMC is the most sessions opened on any one BMC over the whole run.
		MaxPerBMC int `json:"maxPerBMC"`
	} `json:"sessions"`
	// PeakRSSBytes is the manager's peak resident memory (VmHWM) over the run.
	PeakRSSBytes float64 `json:"peakRSSBytes"`
	// RSSPerServerBytes is the growth of the manager's resident memory from before registration
	// to the end of provisioning, per server.
	RSSPerServerBytes float64 `json:"rssPerServerBytes"`
	baseRSS           float64
}

// ReportOptions are the settings a run used.
type ReportOptions struct {
	Hosts                 int      `json:"hosts"`
	Jobs                  int      `json:"jobs,omitempty"`
	Servers               int      `json:"servers"`
	MaxSurge              int      `json:"maxSurge"`
	PowerLatencySeconds   float64  `json:"powerLatencySeconds"`
	BootTimeSeconds       float64  `json:"bootTimeSeconds"`
	RequestLatencySeconds float64  `json:"requestLatencySeconds"`
	EraseSeconds          float64  `json:"eraseSeconds"`
	Concurrency           int      `json:"concurrency"`
	QPS                   float32  `json:"qps"`
	Burst                 int      `json:"burst"`
	BMCCheckInterval      string   `json:"bmcCheckInterval"`
	ManagerArgs           []string `json:"managerArgs,omitempty"`
	CAPIConcurrency       int      `json:"capiConcurrency"`
	CAPIQPS               float32  `json:"capiQPS"`
}

func reportOptionsOf(o Options, servers int) ReportOptions {
	return ReportOptions{
		Hosts: o.Hosts, Jobs: o.Jobs, Servers: servers, MaxSurge: o.MaxSurge,
		PowerLatencySeconds: o.PowerLatency.Seconds(), BootTimeSeconds: o.BootTime.Seconds(),
		RequestLatencySeconds: o.RequestLatency.Seconds(), EraseSeconds: o.EraseDuration.Seconds(),
		Concurrency: o.Concurrency, QPS: o.QPS, Burst: o.Burst, BMCCheckInterval: o.BMCCheckInterval.String(),
		ManagerArgs: o.ManagerArgs, CAPIConcurrency: o.CAPIConcurrency, CAPIQPS: o.CAPIQPS,
	}
}

// Phase is one phase's figures.
type Phase struct {
	Name  string `json:"name"`
	Units int    `json:"units"`
	// WallSeconds from the phase's first request to the moment the benchmark saw it done.
	WallSeconds float64 `json:"wallSeconds"`
	// StartSeconds is how long the benchmark's own requests that start the phase took (its
	// creates and patches, through the admission webhooks), included in WallSeconds; for the
	// idle phase, the idle period itself.
	StartSeconds float64 `json:"startSeconds"`
	// FloorSeconds is the least time the simulator's latencies and the manager's concurrency
	// allow (FloorModel says how it is computed); Ratio is WallSeconds / FloorSeconds.
	FloorSeconds float64 `json:"floorSeconds,omitempty"`
	FloorModel   string  `json:"floorModel,omitempty"`
	Ratio        float64 `json:"ratio,omitempty"`
	// Split is the per-machine breakdown, for phases that create Machines.
	Split *split `json:"split,omitempty"`
	// KubeRequests the manager sent to the API server, by "verb resource" ("verb resource (409)": those
	// refused with 409, a Conflict or AlreadyExists).
	KubeRequests map[string]float64 `json:"kubeRequests"`
	KubeTotal    float64            `json:"kubeTotal"`
	KubeWrites   float64            `json:"kubeWrites"`
	// Redfish requests the simulated BMCs answered.
	Redfish struct {
		Total     int     `json:"total"`
		PerServer float64 `json:"perServer"`
		Max       int     `json:"maxPerServer"`
	} `json:"redfish"`
	// CPUSeconds the manager used; RSSBytes and HeapInuseBytes at the phase's end.
	CPUSeconds     float64      `json:"cpuSeconds"`
	RSSBytes       float64      `json:"rssBytes"`
	HeapInuseBytes float64      `json:"heapInuseBytes"`
	Idle           *IdleFigures `json:"idle,omitempty"`
	// Maintenance describes the maintenance rollout.
	Maintenance *MaintenanceFigures `json:"maintenance,omitempty"`
	// Jobs describes a RedfishJob phase.
	Jobs *JobFigures `json:"jobs,omitempty"`

	start, end time.Time
	perServer  []int
}

// MaintenanceFigures describe the maintenance rollout.
type MaintenanceFigures struct {
	Hosts          int     `json:"hosts"`
	MaxUnavailable int     `json:"maxUnavailable"`
	TaskSeconds    float64 `json:"taskSeconds"`
	// PeakInMaintenance is the most maintenances seen draining or in maintenance at once.
	PeakInMaintenance int `json:"peakInMaintenance"`
	// Stages split each maintenance's life (seconds, median / p95 / max).
	Stages *MaintenanceStages `json:"stages,omitempty"`
}

// MaintenanceStages split a maintenance's life into what a wave is made of.
type MaintenanceStages struct {
	Maintenances int `json:"maintenances"`
	// Drain: Draining → InMaintenance (CAPI drains and deletes the Machine, the host powers off,
	// is erased and released).
	Drain stat `json:"drain"`
	// Of the drain, the maintenance controller's own rounds (from the informers' times):
	// ToMachineDeletion, Draining → the Machine's deletion requested; ReleasedToInMaintenance,
	// the host erased and released → InMaintenance.
	ToMachineDeletion       stat `json:"toMachineDeletion"`
	ReleasedToInMaintenance stat `json:"releasedToInMaintenance"`
	// HeldOff: InMaintenance → the host seen held off (the technician starts the task).
	HeldOff stat `json:"heldOff"`
	// Complete: spec.complete set → Completed (the host handed back).
	Complete stat `json:"complete"`
	// NextStart: a maintenance Completed → the next one Draining in the place it freed (its host
	// back Ready, the next woken and confirmed from the API server, and any wait for the
	// MachineDeployment's share).
	NextStart stat `json:"nextStart"`
	// FirstStartSeconds: the phase's start → the first maintenance seen started (Draining, or
	// InMaintenance when Draining passed between two looks): the maintenances' creation and the
	// gate's first pass; TailSeconds: the last maintenance Completed → the phase done (the
	// MachineDeployment whole again). The waves are in between. Absent when no maintenance
	// completed.
	FirstStartSeconds *float64 `json:"firstStartSeconds,omitempty"`
	TailSeconds       *float64 `json:"tailSeconds,omitempty"`
}

// IdleFigures are the idle phase's rates.
type IdleFigures struct {
	APIWritesPerMinute         float64 `json:"apiWritesPerMinute"`
	APIRequestsPerMinute       float64 `json:"apiRequestsPerMinute"`
	RedfishPerHostPerMinute    float64 `json:"redfishPerHostPerMinute"`
	RedfishPerHostPerMinuteMax float64 `json:"redfishPerHostPerMinuteMax"`
	// ResyncsPerHostPerMinute is what --bmc-check-interval asks for: each is one or more requests.
	ResyncsPerHostPerMinute float64 `json:"resyncsPerHostPerMinute"`
	BMCCheckIntervalSeconds float64 `json:"bmcCheckIntervalSeconds"`
}

func (p *Phase) setFloor(floor time.Duration, model string) {
	p.FloorSeconds, p.FloorModel = floor.Seconds(), model
	if floor > 0 {
		p.Ratio = p.WallSeconds / floor.Seconds()
	}
}

// WriteTable prints the report for people.
func (r *Report) WriteTable(w io.Writer) {
	o := r.Options
	if o.Jobs > 0 {
		fmt.Fprintf(w, "\nRedfishJob benchmark: %d hosts, one job each per phase; P = %gs power, R = %gs per Redfish request\n", o.Servers, o.PowerLatencySeconds, o.RequestLatencySeconds)
	} else {
		fmt.Fprintf(w, "\nN = %d hosts (%d servers: + maxSurge %d + 1 control plane); P = %gs power, B = %gs OS boot, R = %gs per Redfish request, E = %gs erase\n",
			o.Hosts, o.Servers, o.MaxSurge, o.PowerLatencySeconds, o.BootTimeSeconds, o.RequestLatencySeconds, o.EraseSeconds)
	}
	fmt.Fprintf(w, "manager: --concurrency %d --kube-api-qps %g --kube-api-burst %d --bmc-check-interval %s --leader-elect=false %s; CAPI: concurrency %d, %g QPS\n\n",
		o.Concurrency, o.QPS, o.Burst, o.BMCCheckInterval, strings.Join(o.ManagerArgs, " "), o.CAPIConcurrency, o.CAPIQPS)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tunits\twall s\tfloor s\tratio\tmanager CPU s\tAPI requests\tAPI writes\tRedfish req/server\tmax\tRSS MiB\t")
	for _, p := range r.Phases {
		floor, ratio := "-", "-"
		if p.FloorSeconds > 0 {
			floor, ratio = fmt.Sprintf("%.1f", p.FloorSeconds), fmt.Sprintf("%.2f", p.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%.1f\t%.0f\t%.0f\t%.1f\t%d\t%.0f\t\n", p.Name, p.Units, p.WallSeconds, floor, ratio,
			p.CPUSeconds, p.KubeTotal, p.KubeWrites, p.Redfish.PerServer, p.Redfish.Max, p.RSSBytes/(1<<20))
	}
	_ = tw.Flush()

	for _, p := range r.Phases {
		if p.FloorModel != "" {
			fmt.Fprintf(w, "\n%s floor: %s\n", p.Name, p.FloorModel)
		}
		if s := p.Split; s != nil {
			fmt.Fprintf(w, "  per machine (%d), median / p95 / max seconds:\n", s.Machines)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			type row struct {
				name string
				s    stat
			}
			rows := []row{
				{"  CAPI: phase start → Machine created", s.Created},
				{"  wait for a host (Machine created → host claimed)", s.WaitForHost},
				{"  provider: host claimed → Node registered", s.Provider},
				{"    of which over P+B (the provider's own time)", s.ProviderOverhead},
				{"    host claimed → power-on began", s.PowerOnSent},
				{"    host claimed → server powered on", s.PoweredOn},
				{"  CAPI: Node registered → Machine Running", s.NodeToRunning},
				{fmt.Sprintf("  old Machine deletion requested → gone (%d)", s.Deleted), s.Deletion},
			}
			if s.DeletionSteps > 0 {
				rows = append(rows,
					row{fmt.Sprintf("    CAPI: → RedfishMachine deleted (drain) (%d)", s.DeletionSteps), s.ToInfraDeletion},
					row{"    provider: → host asked to release", s.ToRelease},
					row{"    provider: → server seen off", s.ToOff},
					row{"    provider: → host erased and released", s.ToFree},
					row{"    → Machine gone (provider: finalizer after a last host list; CAPI: Node deleted)", s.ToGone})
			}
			for _, row := range rows {
				fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\n", row.name, row.s.Median, row.s.P95, row.s.Max)
			}
			_ = tw.Flush()
		}
		if len(p.KubeRequests) > 0 {
			keys := slices.SortedFunc(maps.Keys(p.KubeRequests), func(a, b string) int {
				if d := p.KubeRequests[b] - p.KubeRequests[a]; d != 0 {
					if d > 0 {
						return 1
					}
					return -1
				}
				return strings.Compare(a, b)
			})
			parts := make([]string, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %.0f", k, p.KubeRequests[k]))
			}
			fmt.Fprintf(w, "  %s API requests by verb and resource: %s\n", p.Name, strings.Join(parts, ", "))
		}
		if mf := p.Maintenance; mf != nil {
			fmt.Fprintf(w, "  maintenance: %d hosts, maxUnavailable %d, task %gs; at most %d draining or in maintenance at once\n",
				mf.Hosts, mf.MaxUnavailable, mf.TaskSeconds, mf.PeakInMaintenance)
			if st := mf.Stages; st != nil {
				fmt.Fprintf(w, "  per maintenance (%d), median / p95 / max seconds:\n", st.Maintenances)
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				for _, row := range []struct {
					name string
					s    stat
				}{
					{"  Draining → InMaintenance (drain, Machine deleted, host off, erased, released)", st.Drain},
					{"    maintenance round: Draining → Machine deletion requested", st.ToMachineDeletion},
					{"    maintenance round: host erased and released → InMaintenance", st.ReleasedToInMaintenance},
					{"  InMaintenance → host seen held off (task starts)", st.HeldOff},
					{"  spec.complete → Completed", st.Complete},
					{"  a maintenance Completed → the next one Draining in its place (gate, MachineDeployment share)", st.NextStart},
				} {
					fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\n", row.name, row.s.Median, row.s.P95, row.s.Max)
				}
				_ = tw.Flush()
				if st.FirstStartSeconds != nil && st.TailSeconds != nil {
					fmt.Fprintf(w, "  phase start → first maintenance started %.2f s; last Completed → phase done %.2f s\n", *st.FirstStartSeconds, *st.TailSeconds)
				}
			}
		}
		if f := p.Jobs; f != nil {
			fmt.Fprintf(w, "  jobs: %d at --concurrency %d, %d failed, %d servers with a duplicated reset; %.1f Redfish requests per job; at most %d new sessions on one BMC; per job %.2f / %.2f / %.2f s (median / p95 / max, created → seen finished)\n",
				f.Jobs, f.Concurrency, f.Failed, f.DuplicatedResets, f.RedfishPerJob, f.SessionsPerBMCMax, f.JobSeconds.Median, f.JobSeconds.P95, f.JobSeconds.Max)
		}
		if i := p.Idle; i != nil {
			fmt.Fprintf(w, "  idle: %.1f API writes/min, %.1f API requests/min; %.2f Redfish requests per host per minute (max %.2f) at %.2f resyncs per host per minute (--bmc-check-interval %gs)\n",
				i.APIWritesPerMinute, i.APIRequestsPerMinute, i.RedfishPerHostPerMinute, i.RedfishPerHostPerMinuteMax, i.ResyncsPerHostPerMinute, i.BMCCheckIntervalSeconds)
		}
	}
	fmt.Fprintf(w, "\nRedfish sessions: %d in all, at most %d on one BMC over the whole run\n", r.Sessions.Total, r.Sessions.MaxPerBMC)
	fmt.Fprintf(w, "manager memory: peak RSS %.0f MiB; %.1f KiB per server (RSS growth from before registration to the end of provisioning)\n",
		r.PeakRSSBytes/(1<<20), r.RSSPerServerBytes/1024)
}
