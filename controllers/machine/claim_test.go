package machine

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// A Machine of the owner a Reuse maintenance gives its host back to waits for that host, even
// when a spare is free: the maintenance still holds the host for a moment after the release.
func TestMachineWaitsForTheHostAReuseMaintenanceGivesBack(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	owner := &infrav1.ObjectRef{APIGroup: clusterv1.GroupVersion.Group, Kind: "MachineDeployment", Namespace: "ns", Name: "workers"}
	available := func(name string, reservedFor *infrav1.ObjectRef) infrav1.RedfishHost {
		h := infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		h.Status.State, h.Status.ReservedFor = infrav1.HostStateAvailable, reservedFor
		return h
	}
	hosts := []infrav1.RedfishHost{available("reused", owner), available("spare", nil)}
	for _, tc := range []struct {
		mode  expv1.MaintenanceMode
		stage expv1.MaintenanceStage
		wait  bool
	}{
		{expv1.Reuse, expv1.StageInMaintenance, true},
		{expv1.Reuse, expv1.StageDraining, true},
		// Waiting for budget or a window: a Machine of the owner waiting for it would use up the
		// budget the maintenance waits for.
		{expv1.Reuse, expv1.StageApproved, false},
		{expv1.Reuse, expv1.StageFailed, false},
		{expv1.Replace, expv1.StageInMaintenance, false},
	} {
		mode := tc.mode
		m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bios"},
			Spec:   expv1.RedfishMaintenanceSpec{HostName: "reused", Mode: mode},
			Status: expv1.RedfishMaintenanceStatus{Stage: tc.stage}}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(m).Build()
		r := &Reconciler{Client: c, APIReader: c}
		s := &scope{rm: &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers-new"}}, machine: &clusterv1.Machine{}}
		got, waiting, err := r.candidates(context.Background(), s, hosts, owner, "")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.wait:
			if len(got) != 0 || !strings.Contains(waiting, "maintenance bios (mode Reuse) gives host reused back") {
				t.Errorf("%s %s: candidates %d, waiting %q; want none, waiting for the host", mode, tc.stage, len(got), waiting)
			}
		default:
			if len(got) != 1 || got[0].Name != "spare" || waiting != "" {
				t.Errorf("%s %s: candidates %v, waiting %q; want the spare", mode, tc.stage, got, waiting)
			}
		}
	}
}

// A host with a RedfishJob not finished (waiting or running) is not offered to a Machine: the
// claim would fight the job over the host's power. A finished job does not keep it out.
func TestAHostWithAnUnfinishedJobIsNotClaimed(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	available := func(name string) infrav1.RedfishHost {
		h := infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		h.Status.State = infrav1.HostStateAvailable
		return h
	}
	hosts := []infrav1.RedfishHost{available("busy"), available("done"), available("free")}
	job := func(name, host string, finished bool) *infrav1.RedfishJob {
		j := &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: infrav1.RedfishJobSpec{HostName: host}}
		if finished {
			now := metav1.NowMicro()
			j.Status.CompletionTime = &now
		}
		return j
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(job("cycle", "busy", false), job("old", "done", true)).Build()
	r := &Reconciler{Client: c, APIReader: c}
	s := &scope{rm: &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}, machine: &clusterv1.Machine{}}
	got, _, err := r.candidates(context.Background(), s, hosts, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range got {
		names = append(names, h.Name)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "done,free" {
		t.Errorf("candidates %v, want done and free (not busy, whose job is not finished)", names)
	}
}
