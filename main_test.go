package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/caprf/cluster-api-provider-redfish/internal/provider"
)

// The manager binary links none of the development environment: no envtest, no simulated BMCs or
// OS, no demo.
func TestManagerLinksNoDevelopmentCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/caprf/cluster-api-provider-redfish/"
	for pkg := range strings.Lines(string(out)) {
		pkg = strings.TrimSpace(pkg)
		if strings.HasPrefix(pkg, module+"internal/dev/") || strings.HasPrefix(pkg, module+"simulator") {
			t.Errorf("the manager links %s", pkg)
		}
	}
}

// A Deployment still passing --watch-filter (which claims never honoured) fails to start with a
// message saying what to do, instead of running unsharded.
func TestWatchFilterIsRefused(t *testing.T) {
	err := run(t.Context(), flags{seedURL: "http://10.0.0.2:30082", seedInsecureHTTP: true, watchFilter: "shard-a"})
	if err == nil || !strings.Contains(err.Error(), "--watch-filter is not supported") {
		t.Fatalf("run with --watch-filter = %v", err)
	}
}

// An unknown feature gate (a misremembered name) stops the manager with the list of known ones
// instead of silently running without the feature.
func TestUnknownFeatureGateIsRefused(t *testing.T) {
	err := run(t.Context(), flags{seedURL: "http://10.0.0.2:30082", seedInsecureHTTP: true, featureGates: map[string]bool{"Upkeep": true}})
	if err == nil || !strings.Contains(err.Error(), `unknown feature "Upkeep" (known: Maintenance)`) {
		t.Fatalf("run with --feature-gates=Upkeep=true = %v", err)
	}
}

// The unauthenticated diagnostics (plain-HTTP metrics, pprof) are refused anywhere but loopback:
// metrics name BMC addresses, pprof exposes the process's memory.
func TestUnauthenticatedDiagnosticsOnlyOnLoopback(t *testing.T) {
	for _, f := range []flags{
		{seedURL: "http://10.0.0.2:30082", seedInsecureHTTP: true, insecureDiagnostics: true, metricsAddr: ":8443"},
		{seedURL: "http://10.0.0.2:30082", seedInsecureHTTP: true, insecureDiagnostics: true, metricsAddr: "0.0.0.0:8080"},
		{seedURL: "http://10.0.0.2:30082", seedInsecureHTTP: true, metricsAddr: ":8443", profilerAddr: ":6060"},
		{seedURL: "http://10.0.0.2:30082", seedInsecureHTTP: true, metricsAddr: ":8443", profilerAddr: "10.0.0.2:6060"},
	} {
		err := run(t.Context(), f)
		if err == nil || !strings.Contains(err.Error(), "without authentication") {
			t.Errorf("run(%+v) = %v, want a refusal", f, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:6060", "[::1]:6060", "localhost:6060"} {
		if !loopback(addr) {
			t.Errorf("loopback(%q) = false", addr)
		}
	}
}

// The API server's warning about our finalizers' names is dropped; any other warning, another
// group's finalizer included, is logged.
func TestOnlyTheWarningAboutOurFinalizerNamesIsDropped(t *testing.T) {
	var logged []string
	h := apiWarnings(funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
	ours := `metadata.finalizers: "redfishhost.infrastructure.cluster.x-k8s.io": prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers`
	theirs := `metadata.finalizers: "example.com": prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers`
	deprecated := "infrastructure.cluster.x-k8s.io/v1alpha1 RedfishHost is deprecated; use v1beta1"
	for _, msg := range []string{ours, theirs, deprecated} {
		h.HandleWarningHeader(299, "", msg)
	}
	if len(logged) != 2 || !strings.Contains(logged[0], "example.com") || !strings.Contains(logged[1], "deprecated") {
		t.Errorf("logged %q, want the other group's finalizer warning and the deprecation, not ours", logged)
	}
}

// The seed server carries bootstrap data (a control plane's join data holds the cluster's CA
// keys): HTTPS needs its certificate, plain HTTP only when asked for, and a mismatch says which
// flag to change.
func TestSeedServerIsHTTPSUnlessPlainHTTPIsAskedFor(t *testing.T) {
	for _, tc := range []struct {
		f       flags
		wantErr string
	}{
		{flags{seedURL: "https://seed.rack.example:30082", seedCertDir: "/certs"}, ""},
		{flags{seedURL: "http://10.0.0.2:30082", seedInsecureHTTP: true}, ""},
		{flags{seedURL: "http://10.0.0.2:30082"}, "--seed-insecure-http"},
		{flags{seedURL: "https://seed.rack.example:30082"}, "--seed-cert-dir"},
		{flags{seedURL: "https://seed.rack.example:30082", seedCertDir: "/certs", seedInsecureHTTP: true}, "contradicts"},
		{flags{seedURL: "http://10.0.0.2:30082", seedCertDir: "/certs", seedInsecureHTTP: true}, ""}, // the release mounts a certificate whatever the scheme
		{flags{seedURL: "10.0.0.2:30082"}, "want https://"},
	} {
		err := checkSeedFlags(tc.f)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: %v, want an error containing %q", tc.f, err, tc.wantErr)
		}
	}
}

// Leader election timings with which two replicas could both lead stop the manager at start,
// saying which flags to change; without leader election they are not looked at.
func TestLeaderElectionTimingsThatLetTwoReplicasLeadStopTheManager(t *testing.T) {
	le := provider.LeaderElection{LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 500 * time.Millisecond}
	err := run(t.Context(), flags{seedURL: "http://10.0.0.2:30082", seedInsecureHTTP: true, leaderElect: true, leaderElection: le})
	if err == nil || !strings.Contains(err.Error(), "--leader-elect-renew-deadline (1.5s) plus twice --leader-elect-retry-period (500ms) must not exceed --leader-elect-lease-duration (2s)") {
		t.Fatalf("run with a 2s lease, 1.5s renew deadline and 500ms retry period = %v", err)
	}
}
