package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControllerManagerControllers are the kube-controller-manager controllers the environment runs:
// those of a real cluster that this provider's behaviour depends on. envtest alone has none, so
// without them an object owned by a deleted object is never collected, a deleted namespace stays
// Terminating forever, and a PodDisruptionBudget never gets the status evictions are checked
// against (every eviction it covers is refused).
var ControllerManagerControllers = []string{"garbagecollector", "namespace", "disruption"}

// controllerManager is a kube-controller-manager process (built by hack/envtest-assets.sh) pointed
// at the environment's API server.
type controllerManager struct {
	cmd      *exec.Cmd
	dir      string
	done     chan error
	exited   chan struct{} // closed when the process exited
	stopping atomic.Bool
}

// startControllerManager starts kube-controller-manager from assets against cfg's API server. Its
// output goes to logger. The process dies with this one (parent-death signal), and in its own
// process group so a terminal's Ctrl-C reaches it only through Stop.
func startControllerManager(assets string, cfg *rest.Config, logger logr.Logger) (*controllerManager, error) {
	bin := filepath.Join(assets, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no kube-controller-manager in %s: run 'make envtest' (builds it from the Go module proxy)", assets)
	}
	dir, err := os.MkdirTemp("", "caprf-kcm-")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(ControllerManagerControllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		// Tests delete owners and wait for their dependents: collect promptly.
		"--concurrent-gc-syncs=10",
		"--concurrent-namespace-syncs=5",
	)
	out := io.Writer(&logWriter{logger: logger.WithName("kube-controller-manager")})
	if os.Getenv("TESTENV_APISERVER_LOGS") != "" {
		out = os.Stderr
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Setpgid: a Ctrl-C in the terminal does not kill it behind Stop's back. Pdeathsig: it dies
	// with this process, however this process ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	m := &controllerManager{cmd: cmd, dir: dir, done: make(chan error, 1), exited: make(chan struct{})}
	log := logger.WithName("kube-controller-manager")
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that started the child exits: keep that
		// thread for as long as the child runs.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		close(m.exited)
		if !m.stopping.Load() {
			// Garbage collection and namespace deletion stop with it: say so where tests look.
			log.Error(err, "kube-controller-manager exited on its own: garbage collection, namespace deletion and disruption budgets no longer run")
			fmt.Fprintf(os.Stderr, "testenv: kube-controller-manager exited on its own: %v\n", err)
		}
		m.done <- err
	}()
	if err := <-started; err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	return m, nil
}

// Stop terminates the process (SIGTERM, then SIGKILL after 10s) and removes its files.
func (m *controllerManager) Stop() error {
	defer func() { _ = os.RemoveAll(m.dir) }()
	m.stopping.Store(true)
	select {
	case <-m.exited: // already gone: its process group id may be someone else's now
		return exited(<-m.done)
	default:
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-m.done:
		return exited(err)
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case err := <-m.done:
		return exited(err)
	case <-time.After(5 * time.Second):
		return errors.New("kube-controller-manager did not exit after SIGKILL")
	}
}

// exited is the outcome of waiting for a process this code signalled: any exit status is expected,
// only a failure to wait is an error.
func exited(err error) error {
	var exit *exec.ExitError
	if err == nil || errors.As(err, &exit) {
		return nil
	}
	return err
}

// logWriter turns a process's output into log lines.
type logWriter struct {
	logger  logr.Logger
	partial []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil // no newline yet: keep the rest for the next write
		}
		w.logger.Info(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
}

// withParentDeathSignal returns a folder with a wrapper for each named binary of assets that runs
// it under `setpriv --pdeathsig KILL`, so it dies with the process that started it (this one)
// even when that is killed; and a func removing the folder. Without setpriv (util-linux) it
// returns assets itself.
func withParentDeathSignal(assets string, names ...string) (string, func(), error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return assets, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "caprf-envtest-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	for _, name := range names {
		script := fmt.Sprintf("#!/bin/sh\nexec %q --pdeathsig KILL -- %q \"$@\"\n", setpriv, filepath.Join(assets, name))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o700); err != nil { //nolint:gosec // an executable wrapper, private to this user.
			cleanup()
			return "", nil, err
		}
	}
	return dir, cleanup, nil
}
