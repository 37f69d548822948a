package controllers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// Every RBAC marker sits in setup.go under a comment saying what uses it: the release's
// ClusterRole is generated from them, and a permission nobody can justify is not granted.
func TestEveryRuleOfTheManagerRoleIsJustified(t *testing.T) {
	src, err := os.ReadFile("setup.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	markers := 0
	for i, l := range lines {
		if !strings.HasPrefix(l, "// +kubebuilder:rbac:") {
			continue
		}
		markers++
		j := i - 1
		for j >= 0 && strings.HasPrefix(lines[j], "// +kubebuilder:rbac:") {
			j-- // markers of one justification, e.g. events in both APIs
		}
		if j < 0 || !strings.HasPrefix(lines[j], "// ") || len(strings.TrimSpace(strings.TrimPrefix(lines[j], "//"))) < 10 {
			t.Errorf("setup.go:%d: RBAC marker without a comment above saying what uses it: %s", i+1, l)
		}
	}
	if markers == 0 {
		t.Fatal("no RBAC markers found in setup.go")
	}
	// Nowhere else: one place to read the manager's permissions.
	walked := 0
	if err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "dev") {
			return filepath.SkipDir
		}
		walked++
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Base(path) == "setup.go" && filepath.Base(filepath.Dir(path)) == "controllers" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), "+kubebuilder:"+"rbac:") {
			t.Errorf("%s holds RBAC markers: move them to controllers/setup.go with their justification", path)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if walked < 100 {
		t.Fatalf("walked %d files: not the repository", walked)
	}
}

// The generated ClusterRole grants what the code uses and nothing broader: no wildcard verb, a
// wildcard resource only to read control-plane objects (any provider's kind), no whole-object
// update, and on Secrets exactly what seeds and credentials need.
func TestTheManagerRoleGrantsNothingBroad(t *testing.T) {
	raw, err := os.ReadFile("../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(raw, role); err != nil {
		t.Fatal(err)
	}
	secretVerbs := []string{}
	for _, r := range role.Rules {
		desc := strings.Join(r.APIGroups, ",") + " " + strings.Join(r.Resources, ",") + ": " + strings.Join(r.Verbs, ",")
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.APIGroups, "*") || slices.Contains(r.Verbs, "deletecollection") || slices.Contains(r.Verbs, "escalate") || slices.Contains(r.Verbs, "impersonate") {
			t.Errorf("rule %s: a wildcard or escalating verb", desc)
		}
		if slices.Contains(r.Resources, "*") && (!slices.Equal(r.APIGroups, []string{"controlplane.cluster.x-k8s.io"}) || !slices.Equal(r.Verbs, []string{"get"})) {
			t.Errorf("rule %s: a wildcard resource beyond reading control-plane objects", desc)
		}
		for _, res := range r.Resources {
			if slices.Contains(r.Verbs, "update") && !strings.HasSuffix(res, "/status") && !strings.HasSuffix(res, "/finalizers") {
				t.Errorf("rule %s: update of whole %s objects (patch them)", desc, res)
			}
			if slices.Contains(r.APIGroups, "") && res == "secrets" {
				secretVerbs = append(secretVerbs, r.Verbs...)
			}
			if slices.Contains(r.APIGroups, "") && res != "secrets" && res != "events" {
				t.Errorf("rule %s: core resource %s is not used by the manager (workload Nodes are reached through the cluster's kubeconfig)", desc, res)
			}
		}
	}
	slices.Sort(secretVerbs)
	if want := []string{"create", "delete", "get", "list", "patch", "watch"}; !slices.Equal(secretVerbs, want) {
		t.Errorf("Secrets verbs %v, want %v (get by name; list/watch for the metadata-only informers; create/delete seeds; patch the credentials finalizer)", secretVerbs, want)
	}
}
