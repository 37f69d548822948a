package simcli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// run runs the command until it has printed what it prints, then stops it.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the servers stop right after printing
	var stdout, stderr bytes.Buffer
	err := Run(ctx, args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestTwoRunsNeverRegisterTheSameHost(t *testing.T) {
	first, _, err := run(t, "--servers", "2", "--manifests")
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := run(t, "--servers", "2", "--manifests")
	if err != nil {
		t.Fatal(err)
	}
	field := func(manifests, key string) []string {
		var out []string
		for _, line := range strings.Split(manifests, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+": "); ok {
				out = append(out, v)
			}
		}
		return out
	}
	for _, key := range []string{"name", "bootMACAddress", "address"} {
		seen := map[string]bool{}
		for _, v := range field(first, key) {
			seen[v] = true
		}
		for _, v := range field(second, key) {
			if seen[v] {
				t.Errorf("both runs print %s %s", key, v)
			}
		}
	}
	if strings.Contains(first, "namespace:") {
		t.Errorf("manifests without --namespace must leave the namespace to kubectl:\n%s", first)
	}
	withNS, _, err := run(t, "--servers", "1", "--manifests", "--namespace", "demo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(withNS, "namespace: demo") != 2 {
		t.Errorf("--namespace demo must put both objects in demo:\n%s", withNS)
	}
}

func TestBadFlagsAreRefusedBeforeAnythingStarts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--servers", "0"}, "--servers 0: must be between 1 and 65536"},
		{[]string{"--fleet", "70000"}, "--fleet 70000: must be between 0 and 65535"},
		{[]string{"--manifests", "--kubeconfig", "x"}, "--manifests and --kubeconfig exclude each other"},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig"}, "reading --kubeconfig"},
		{[]string{"--profiles", "dmtf,hp"}, `--profiles: unknown simulator profile "hp"`},
	} {
		_, _, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: want an error containing %q, got %v", tc.args, tc.want, err)
		}
	}
}

func TestProfilesAreGivenToTheServersInTurn(t *testing.T) {
	out, _, err := run(t, "--servers", "3", "--profiles", "hpe-ilo5,bladed")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		got = append(got, line[strings.LastIndex(line, "profile=")+len("profile="):])
	}
	if strings.Join(got, ",") != "hpe-ilo5,bladed,hpe-ilo5" {
		t.Errorf("profiles %v, want hpe-ilo5, bladed, hpe-ilo5:\n%s", got, out)
	}
}
