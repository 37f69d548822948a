package demo

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// syncBuffer collects the demo's output; onLine sees every write.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	onLine func(string)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.onLine != nil {
		b.onLine(string(p))
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// apiServerGone fails the test when the API server the demo's kubeconfig names still accepts
// connections.
func apiServerGone(t *testing.T, dir string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatalf("reading the kubeconfig the demo wrote: %v", err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = conn.Close()
		t.Fatalf("kube-apiserver at %s still accepts connections after the demo returned", u.Host)
	}
}

func TestLifecycleBringsUpTheClusterThenRollsTheWorkersToANewTemplate(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	dir := t.TempDir()
	out := &syncBuffer{}
	if err := Run(t.Context(), Options{Dir: dir, Out: out}); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	text := out.String()
	// Run returns nil only once every worker runs a Node cloned from workers-v2; the narration must
	// say so too, in order.
	last := -1
	for _, want := range []string{"control plane up: export KUBECONFIG=", "cluster up in", "deleted template workers-v1", "rolling update done in", "complete", "nothing left running"} {
		i := strings.Index(text, want)
		if i < last {
			t.Fatalf("output lacks %q after the previous milestone:\n%s", want, text)
		}
		last = i
	}
	if n := strings.Count(text, "image=http://images.example/node-v2.iso"); n != 2 {
		t.Errorf("final table shows %d workers on node-v2.iso, want 2:\n%s", n, text)
	}
	apiServerGone(t, dir)
}

func TestInterruptStopsEverythingMidScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &syncBuffer{onLine: func(line string) {
		if strings.Contains(line, "created Cluster") {
			cancel() // what Ctrl-C does in cmd/caprf-dev
		}
	}}
	start := time.Now()
	err := Run(ctx, Options{Dir: dir, Out: out})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled after the interrupt, got %v\n%s", err, out)
	}
	t.Logf("interrupted run returned after %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out.String(), "nothing left running") {
		t.Fatalf("no clean stop reported:\n%s", out)
	}
	apiServerGone(t, dir)
}

func TestFleetTooSmallForTheRollingUpdateIsRefusedBeforeAnythingStarts(t *testing.T) {
	err := Run(t.Context(), Options{Servers: 3, Workers: 2, Out: &syncBuffer{}})
	if err == nil || !strings.Contains(err.Error(), "--servers 3 is too few") {
		t.Fatalf("got %v", err)
	}
}

func TestUnknownScenarioIsRefusedBeforeAnythingStarts(t *testing.T) {
	err := Run(t.Context(), Options{Scenario: "nope", Out: &syncBuffer{}})
	if err == nil || !strings.Contains(err.Error(), `unknown scenario "nope"; known: lifecycle`) {
		t.Fatalf("got %v", err)
	}
}
