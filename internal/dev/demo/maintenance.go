package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
)

// maintenance: a cluster comes up, then the fleet operator asks for a maintenance of every
// worker's host (OwnerApproval, power off and hold for a part swap) under a budget of one host
// at a time; the cluster owner approves them on the RedfishMachines; CAPI drains and replaces
// each worker elsewhere, a technician completes each, and the hosts return to the pool.
func maintenance(ctx context.Context, w *World) error {
	if err := w.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		return err
	}
	w.Printf("registering %d simulated servers as RedfishHosts", len(w.Fleet.Servers))
	if err := w.RegisterFleet(ctx); err != nil {
		return err
	}
	tmpl := sample.MachineTemplate(Namespace, "workers", infrav1.RedfishMachineSpec{
		Image: &infrav1.Image{URL: "http://images.example/node-v1.iso", Format: "live-iso"}, AutomatedCleaningMode: infrav1.CleaningModeDisabled,
	})
	if _, err := w.bringUpCluster(ctx, tmpl, 1, 0); err != nil {
		return err
	}
	machines, err := w.Machines(ctx)
	if err != nil {
		return err
	}

	one := intstr.FromInt32(1)
	policy := &expv1.RedfishMaintenancePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "rack"},
		Spec: expv1.RedfishMaintenancePolicySpec{MaxUnavailable: &one}}
	if err := w.Create(ctx, policy); err != nil {
		return err
	}
	w.Printf("fleet operator: RedfishMaintenancePolicy %s, maxUnavailable 1 (every host of the namespace)", policy.Name)
	var names, workerHosts []string
	for _, m := range machines {
		if m.Group == "control plane" {
			continue
		}
		mt := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "dimm-" + m.Host},
			Spec: expv1.RedfishMaintenanceSpec{HostName: m.Host, Reason: "replace DIMM B2 (correctable errors)", Requestor: "dc-ops",
				Policy: expv1.OwnerApproval, Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}}}
		if err := w.Create(ctx, mt); err != nil {
			return err
		}
		names, workerHosts = append(names, mt.Name), append(workerHosts, m.Host)
	}
	w.Printf("fleet operator: RedfishMaintenances (OwnerApproval, powerOffAndHold) for the worker hosts %s", strings.Join(workerHosts, ", "))

	// The cluster owner approves each maintenance announced on a RedfishMachine, by name and UID.
	approved := map[string]bool{}
	if err := w.Until(ctx, "the owner to see and approve every announcement", time.Minute, func(ctx context.Context) (bool, error) {
		rms := &infrav1.RedfishMachineList{}
		if err := w.List(ctx, rms, client.InNamespace(Namespace)); err != nil {
			return false, err
		}
		for i := range rms.Items {
			rm := &rms.Items[i]
			for _, a := range rm.Status.Maintenances {
				if approved[a.Name] {
					continue
				}
				before := rm.DeepCopy()
				rm.Spec.MaintenanceApprovals = append(rm.Spec.MaintenanceApprovals, infrav1.MaintenanceApproval{Name: a.Name, UID: a.UID})
				if err := w.Patch(ctx, rm, client.MergeFrom(before)); err != nil {
					return false, nil //nolint:nilerr // changed meanwhile: read again
				}
				approved[a.Name] = true
				w.Printf("cluster owner: approved %s on RedfishMachine %s (announced: %q, uid %s)", a.Name, rm.Name, a.Reason, a.UID)
			}
		}
		return len(approved) == len(names), nil
	}); err != nil {
		return err
	}

	// The technician completes each maintenance once its host is held off; the budget lets one
	// host be out at a time.
	peak, completed, fewest := 0, map[string]bool{}, int(w.Opts.Workers)
	start := w.Since()
	if err := w.Until(ctx, "every maintenance to complete", 10*time.Minute, func(ctx context.Context) (bool, error) {
		list := &expv1.RedfishMaintenanceList{}
		if err := w.List(ctx, list, client.InNamespace(Namespace)); err != nil {
			return false, err
		}
		out := 0
		for i := range list.Items {
			m := &list.Items[i]
			switch m.Status.Stage {
			case expv1.StageDraining, expv1.StageInMaintenance:
				out++
			case expv1.StageCompleted:
				if !completed[m.Name] {
					completed[m.Name] = true
					w.Printf("%s completed: %s", m.Name, stageLine(m))
				}
			}
			h := &infrav1.RedfishHost{}
			if m.Status.Stage != expv1.StageInMaintenance || m.Spec.Complete || w.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: m.Spec.HostName}, h) != nil || h.Status.PowerState != "Off" {
				continue
			}
			before := m.DeepCopy()
			m.Spec.Complete = true
			if err := w.Patch(ctx, m, client.MergeFrom(before)); err == nil {
				w.Printf("technician: host %s is off and held; DIMM swapped, %s marked complete", m.Spec.HostName, m.Name)
			}
		}
		peak = max(peak, out)
		ms, err := w.Machines(ctx)
		if err != nil {
			return false, err
		}
		running := 0
		for _, m := range ms {
			if m.Group != "control plane" && m.Phase == "Running" && !m.Deleting && m.Node != "" {
				running++
			}
		}
		fewest = min(fewest, running)
		return len(completed) == len(names), nil
	}); err != nil {
		return err
	}
	if peak > 1 || fewest < int(w.Opts.Workers)-1 {
		return fmt.Errorf("budget: %d hosts were in maintenance at once and as few as %d of %d workers ran; maxUnavailable is 1", peak, fewest, w.Opts.Workers)
	}
	w.Printf("maintenance done in %s: %d hosts maintained one at a time; never fewer than %d of %d workers running (budget maxUnavailable 1)",
		(w.Since() - start).Round(100*time.Millisecond), len(names), fewest, w.Opts.Workers)
	if err := w.Until(ctx, "the workers to run again", 5*time.Minute, w.rolledOut(tmpl.Name)); err != nil {
		return err
	}
	if err := w.PrintMachines(ctx); err != nil {
		return err
	}
	now, err := w.workerHosts(ctx)
	if err != nil {
		return err
	}
	w.Printf("workers now run on %s; they ran on %s", strings.Join(now, ", "), strings.Join(slices.Sorted(slices.Values(workerHosts)), ", "))
	return nil
}

// stageLine lists a maintenance's stages with the time spent reaching each.
func stageLine(m *expv1.RedfishMaintenance) string {
	parts := make([]string, 0, len(m.Status.Stages))
	for i, s := range m.Status.Stages {
		if i == 0 {
			parts = append(parts, string(s.Stage))
			continue
		}
		d := s.Time.Sub(m.Status.Stages[i-1].Time.Time).Round(time.Second)
		parts = append(parts, fmt.Sprintf("%s (+%s)", s.Stage, d))
	}
	return strings.Join(parts, " → ")
}
