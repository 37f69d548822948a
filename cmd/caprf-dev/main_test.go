package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/caprf/cluster-api-provider-redfish/internal/dev/testenv"
)

// Every way `make dev` can end must stop kube-apiserver, etcd and kube-controller-manager: the
// terminal closing (SIGHUP), kill (SIGTERM), Ctrl-C with stdout already gone (`make dev | tee`),
// and the demo itself being killed outright (its children die with it).
func TestEveryWayTheDemoEndsStopsTheControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("needs envtest; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "caprf-dev")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building caprf-dev: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name        string
		closeStdout bool
		signal      syscall.Signal
	}{
		{name: "terminal closed (SIGHUP)", signal: syscall.SIGHUP},
		{name: "killed (SIGTERM)", signal: syscall.SIGTERM},
		{name: "Ctrl-C with stdout closed (SIGINT, broken pipe)", signal: syscall.SIGINT, closeStdout: true},
		{name: "killed outright (SIGKILL)", signal: syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(bin, "--dir", dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			// Its stderr (where a manager that stopped on its own says why) is shown on failure.
			stderr := &testenv.Output{}
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				if t.Failed() {
					t.Logf("the demo's stderr:\n%s", stderr.String())
				}
			})

			// Wait until the control plane is up, then end the demo the way the case says.
			upc := make(chan bool, 1)
			go func() {
				lines := bufio.NewScanner(stdout)
				for lines.Scan() {
					if strings.Contains(lines.Text(), "control plane up") {
						upc <- true
						return
					}
				}
				upc <- false
			}()
			select {
			case up := <-upc:
				if !up {
					t.Fatalf("the demo never said the control plane is up: %v", <-done)
				}
			case <-time.After(5 * time.Minute):
				t.Fatal("the demo did not say the control plane is up within 5 minutes")
			}
			server := apiServer(t, dir)
			children := controlPlaneProcesses(t, server)
			if tc.closeStdout {
				_ = stdout.(io.Closer).Close()
			} else {
				go func() { _, _ = io.Copy(io.Discard, stdout) }()
			}
			if err := cmd.Process.Signal(tc.signal); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Logf("the demo exited: %v", err) // a signal's exit status is expected
			case <-time.After(90 * time.Second):
				t.Fatal("the demo did not exit within 90s")
			}
			if tc.signal == syscall.SIGKILL {
				// Killed outright, the demo cannot stop anything: kube-controller-manager dies
				// with it (a parent-death signal on a thread kept for it). kube-apiserver and etcd
				// get one through setpriv, from whichever thread envtest started them on, which
				// is best effort: they are not checked, and stopped here.
				waitGone(t, "kube-controller-manager", children["kube-controller-manager"])
				for _, name := range []string{"kube-apiserver", "etcd"} {
					_ = syscall.Kill(children[name], syscall.SIGKILL)
				}
				return
			}
			if conn, err := net.DialTimeout("tcp", server, time.Second); err == nil {
				_ = conn.Close()
				t.Fatalf("kube-apiserver at %s still accepts connections after the demo ended", server)
			}
			for name, pid := range children {
				waitGone(t, name, pid)
			}
		})
	}
}

// apiServer returns host:port of the API server the demo's kubeconfig names.
func apiServer(t *testing.T, dir string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatalf("reading the kubeconfig the demo wrote: %v", err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// controlPlaneProcesses finds the demo's kube-apiserver (by its port), its etcd (by the address
// the API server uses) and its kube-controller-manager (by its kubeconfig's server).
func controlPlaneProcesses(t *testing.T, server string) map[string]int {
	t.Helper()
	_, port, _ := net.SplitHostPort(server)
	type proc struct {
		pid  int
		args []string
	}
	var procs []proc
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		raw, err := os.ReadFile(f)
		if err != nil || len(raw) == 0 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		procs = append(procs, proc{pid: pid, args: strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")})
	}
	flag := func(p proc, name string) string {
		for _, a := range p.args {
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v
			}
		}
		return ""
	}
	found := map[string]int{}
	etcd := ""
	for _, p := range procs {
		switch filepath.Base(p.args[0]) {
		case "kube-apiserver":
			if flag(p, "--secure-port") == port {
				found["kube-apiserver"] = p.pid
				etcd = strings.TrimPrefix(flag(p, "--etcd-servers"), "http://")
			}
		case "kube-controller-manager":
			if cfg, err := clientcmd.BuildConfigFromFlags("", flag(p, "--kubeconfig")); err == nil && hostOf(cfg.Host) == server {
				found["kube-controller-manager"] = p.pid
			}
		}
	}
	for _, p := range procs {
		if filepath.Base(p.args[0]) == "etcd" && etcd != "" && strings.Contains(strings.Join(p.args, " "), etcd) {
			found["etcd"] = p.pid
		}
	}
	if len(found) != 3 {
		t.Fatalf("found %v of the demo's kube-apiserver, etcd and kube-controller-manager", found)
	}
	return found
}

func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Host
}

// waitGone waits until process pid has exited (gone, or a zombie nobody reaped yet).
func waitGone(t *testing.T, name string, pid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if s := string(raw); strings.Contains(s[strings.LastIndexByte(s, ')')+1:], " Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs after the demo ended", name, pid)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
