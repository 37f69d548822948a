// Package metrics holds the provider's Prometheus metrics, registered with controller-runtime's
// registry (served on the manager's metrics endpoint).
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// BMCRequests counts HTTP requests sent to BMCs by host, method and status code ("error"
	// when no answer came).
	BMCRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caprf_bmc_requests_total", Help: "Redfish HTTP requests sent to BMCs.",
	}, []string{"bmc", "method", "code"})

	// BMCLatency observes BMC answer times.
	BMCLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "caprf_bmc_request_duration_seconds", Help: "Time BMCs took to answer Redfish requests.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{"bmc"})

	// HostState is 1 for the state each host is in.
	HostState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "caprf_host_state", Help: "Lifecycle state of each RedfishHost (1 for the current state).",
	}, []string{"namespace", "host", "state"})

	// PowerOperations counts power actions sent to hosts.
	PowerOperations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caprf_power_operations_total", Help: "Power actions (Redfish reset types) requested; the BMC layer skips one the host already completed.",
	}, []string{"namespace", "host", "type"})

	// ClaimConflicts counts claims the API server refused (the host changed since it was read),
	// by what a fresh read found: "claimed" (another machine won the host) or "changed" (the host
	// changed otherwise and is still free; the machine tries again).
	ClaimConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caprf_claim_conflicts_total", Help: "Host claims refused because the host changed since it was read, by outcome: claimed (by another machine) or changed.",
	}, []string{"namespace", "outcome"})

	// MaintenanceStage is 1 for the stage each RedfishMaintenance is in.
	MaintenanceStage = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "caprf_maintenance_stage", Help: "Stage of each RedfishMaintenance (1 for the current stage).",
	}, []string{"namespace", "maintenance", "stage"})

	// MaintenanceStageSeconds observes how long maintenances spent in each stage they left.
	MaintenanceStageSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "caprf_maintenance_stage_duration_seconds", Help: "Time RedfishMaintenances spent in a stage, observed when they leave it.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10),
	}, []string{"stage"})

	// MaintenanceBudget reports each RedfishMaintenancePolicy's budget in use.
	MaintenanceBudget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "caprf_maintenance_budget", Help: "Per RedfishMaintenancePolicy: hosts selected, unavailable (not Ready for any reason, or in maintenance; a maintenance's replacement booting counts once), in maintenance, and maxUnavailable.",
	}, []string{"namespace", "policy", "kind"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(BMCRequests, BMCLatency, HostState, PowerOperations, ClaimConflicts,
		MaintenanceStage, MaintenanceStageSeconds, MaintenanceBudget)
}

// ObserveBMC records one BMC request; status 0 means no answer.
func ObserveBMC(bmc, method string, status int, d time.Duration) {
	code := "error"
	if status > 0 {
		code = strconv.Itoa(status)
	}
	BMCRequests.WithLabelValues(bmc, method, code).Inc()
	BMCLatency.WithLabelValues(bmc).Observe(d.Seconds())
}

// SetHostState makes state the only state reported for a host.
func SetHostState(namespace, host, state string) {
	HostState.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "host": host})
	if state != "" {
		HostState.WithLabelValues(namespace, host, state).Set(1)
	}
}

// SetMaintenanceStage makes stage the only stage reported for a maintenance ("" forgets it).
func SetMaintenanceStage(namespace, name, stage string) {
	MaintenanceStage.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "maintenance": name})
	if stage != "" {
		MaintenanceStage.WithLabelValues(namespace, name, stage).Set(1)
	}
}
