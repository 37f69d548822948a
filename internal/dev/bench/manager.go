package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
	"github.com/caprf/cluster-api-provider-redfish/internal/metrics"
)

// managerProc is the real manager binary, run as its own process so that its CPU time, memory and
// API requests are its own.
type managerProc struct {
	cmd         *exec.Cmd
	exited      chan error
	metricsURL  string
	SeedURL     string
	LogPath     string
	Concurrency int
}

// buildManager builds the manager binary from the module's root into dir.
func buildManager(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build of the manager: %w\n%s", err, out)
	}
	return bin, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// startManager runs bin against the environment's API server with the given tuning flags.
func startManager(ctx context.Context, env *testenv.Environment, bin, dir string, o Options) (*managerProc, error) {
	addrs := make([]string, 4)
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	seedAddr, metricsAddr, probeAddr, webhookAddr := addrs[0], addrs[1], addrs[2], addrs[3]
	_, webhookPort, _ := net.SplitHostPort(webhookAddr)
	certDir, err := testenv.WriteServingCert(filepath.Join(dir, "certs"), "caprf-webhook-service.caprf-system.svc")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, testenv.KubeconfigOptions{}); err != nil {
		return nil, err
	}
	args := []string{
		// Plain HTTP on loopback, and no per-source limits: every simulated host fetches its seed
		// from 127.0.0.1, one source where a real rack has one address per host.
		"--seed-url=http://" + seedAddr, "--seed-bind-address=" + seedAddr, "--seed-insecure-http",
		"--seed-rate=1000000", "--seed-burst=1000000", "--seed-ipxe-rate=1000000", "--seed-ipxe-burst=1000000",
		"--metrics-bind-address=" + metricsAddr, "--insecure-diagnostics",
		"--health-probe-bind-address=" + probeAddr, "--webhook-port=" + webhookPort, "--webhook-cert-dir=" + certDir,
		"--leader-elect=false", "--feature-gates=Maintenance=true",
		"--concurrency=" + strconv.Itoa(o.Concurrency),
		fmt.Sprintf("--kube-api-qps=%g", o.QPS), "--kube-api-burst=" + strconv.Itoa(o.Burst),
		"--bmc-check-interval=" + o.BMCCheckInterval.String(),
	}
	args = append(args, o.ManagerArgs...)
	logPath := filepath.Join(dir, "manager.log")
	// Appended to: a manager restarted by the benchmark logs after the one before.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...) //nolint:gosec,noctx // stopped with SIGTERM by stop.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, err
	}
	m := &managerProc{cmd: cmd, exited: make(chan error, 1), metricsURL: "http://" + metricsAddr + "/metrics",
		SeedURL: "http://" + seedAddr, LogPath: logPath, Concurrency: o.Concurrency}
	go func() { m.exited <- cmd.Wait(); _ = logFile.Close() }()
	// Ready when it serves its probes; its log says why not.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + probeAddr + "/readyz") //nolint:noctx // a probe
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m, nil
			}
		}
		select {
		case err := <-m.exited:
			return nil, fmt.Errorf("the manager exited before it was ready (its log: %s): %w", logPath, err)
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), m.stop())
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("the manager was not ready within 2 minutes; its log: %s", logPath), m.stop())
		}
	}
}

// stop sends SIGTERM, as the kubelet does, and waits for the manager to exit.
func (m *managerProc) stop() error {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.exited:
		m.exited <- err
		return err
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		return errors.New("the manager did not stop within 30s of SIGTERM")
	}
}

// usage is what the manager had done and used at one moment.
type usage struct {
	At          time.Time
	CPUSeconds  float64
	RSSBytes    float64
	PeakRSS     float64 // VmHWM: the most resident memory so far
	HeapInuse   float64
	KubeByKind  map[string]float64 // "verb resource" → requests ("verb resource (409)": those answered 409)
	BMCRequests float64
}

// sample scrapes the manager's metrics endpoint and its /proc entry.
func (m *managerProc) sample() (usage, error) {
	s := usage{At: time.Now(), KubeByKind: map[string]float64{}}
	resp, err := http.Get(m.metricsURL) //nolint:noctx // local scrape
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return s, fmt.Errorf("parsing the manager's metrics: %w", err)
	}
	value := func(name string) float64 {
		f := families[name]
		if f == nil || len(f.GetMetric()) == 0 {
			return 0
		}
		return metricValue(f.GetMetric()[0])
	}
	s.CPUSeconds = value("process_cpu_seconds_total")
	s.RSSBytes = value("process_resident_memory_bytes")
	s.HeapInuse = value("go_memstats_heap_inuse_bytes")
	if f := families["caprf_kube_api_requests_total"]; f != nil {
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			key := labels["verb"] + " " + labels["resource"]
			if labels["code"] == "409" {
				// Refused: a write against an older version (a Conflict, tried again), or a create
				// of what exists (AlreadyExists).
				key += " (409)"
			}
			s.KubeByKind[key] += metricValue(mt)
		}
	}
	if f := families["caprf_bmc_requests_total"]; f != nil {
		for _, mt := range f.GetMetric() {
			s.BMCRequests += metricValue(mt)
		}
	}
	s.PeakRSS = peakRSS(m.cmd.Process.Pid)
	return s, nil
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// peakRSS reads VmHWM (the peak resident set) of a process, in bytes; 0 where /proc has none.
func peakRSS(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// kubeDelta is what the manager asked of the API server between two samples, by "verb resource".
func kubeDelta(a, b usage) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b.KubeByKind {
		if d := v - a.KubeByKind[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// writes sums the changing requests of a delta.
func writes(d map[string]float64) float64 {
	total := 0.0
	for k, v := range d {
		if verb, _, _ := strings.Cut(k, " "); metrics.IsKubeWrite(verb) {
			total += v
		}
	}
	return total
}
