package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
)

const (
	clusterName = "demo"
	mdName      = "workers"
)

// lifecycle: register the fleet, bring up a cluster (a control-plane Machine and a
// MachineDeployment), then roll the workers to a new template and delete the old one.
func lifecycle(ctx context.Context, w *World) error {
	if err := w.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		return err
	}
	w.Printf("registering %d simulated servers as RedfishHosts (BMC address + credentials Secret each)", len(w.Fleet.Servers))
	if err := w.RegisterFleet(ctx); err != nil {
		return err
	}
	if err := w.Until(ctx, "every host inspected and Available", 2*time.Minute, func(ctx context.Context) (bool, error) {
		hosts := &infrav1.RedfishHostList{}
		if err := w.List(ctx, hosts, client.InNamespace(Namespace)); err != nil {
			return false, err
		}
		for _, h := range hosts.Items {
			if h.Status.State != infrav1.HostStateAvailable {
				return false, nil
			}
		}
		return len(hosts.Items) == len(w.Fleet.Servers), nil
	}); err != nil {
		return err
	}

	// nodeReuse: a worker's replacement lands back on the host it ran on, even once its template
	// is deleted (no cleaning, so reused disks keep their data).
	// The workers run a raw disk image, written to each host's root drive by the deploy image.
	v1 := sample.MachineTemplate(Namespace, "workers-v1", infrav1.RedfishMachineSpec{
		Image:     w.images.image("node-v1.raw"),
		NodeReuse: true, AutomatedCleaningMode: infrav1.CleaningModeDisabled,
	})
	// maxSurge 0 / maxUnavailable 1: an old worker goes first and its replacement takes its host.
	md, err := w.bringUpCluster(ctx, v1, 0, 1)
	if err != nil {
		return err
	}
	before, err := w.workerHosts(ctx)
	if err != nil {
		return err
	}
	w.Printf("what the deploy image wrote where:")
	if err := w.PrintInstalls(ctx); err != nil {
		return err
	}

	v2 := sample.MachineTemplate(Namespace, "workers-v2", infrav1.RedfishMachineSpec{
		Image:     w.images.image("node-v2.raw"),
		NodeReuse: true, AutomatedCleaningMode: infrav1.CleaningModeDisabled,
	})
	if err := w.Create(ctx, v2); err != nil {
		return err
	}
	if err := w.Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
		return err
	}
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.InfrastructureRef.Name = v2.Name
	if err := w.Patch(ctx, md, patch); err != nil {
		return fmt.Errorf("pointing MachineDeployment %s at %s: %w", mdName, v2.Name, err)
	}
	if err := w.Delete(ctx, v1); err != nil {
		return fmt.Errorf("deleting template %s: %w", v1.Name, err)
	}
	w.Printf("rolling MachineDeployment %s to template %s (image node-v2.raw); deleted template %s, as GitOps pruning would", mdName, v2.Name, v1.Name)
	rollStart := w.Since()
	if err := w.Until(ctx, "the rolling update to finish", 5*time.Minute, w.rolledOut(v2.Name)); err != nil {
		return err
	}
	w.Printf("rolling update done in %s: every worker replaced, on image node-v2.raw", (w.Since() - rollStart).Round(100*time.Millisecond))
	if err := w.PrintMachines(ctx); err != nil {
		return err
	}
	w.Printf("what the deploy image wrote where:")
	if err := w.PrintInstalls(ctx); err != nil {
		return err
	}
	after, err := w.workerHosts(ctx)
	if err != nil {
		return err
	}
	if !slices.Equal(before, after) {
		return fmt.Errorf("nodeReuse: the new workers run on %v, the old ones ran on %v", after, before)
	}
	w.Printf("nodeReuse: every new worker landed back on a host of the old ones (%s), though template %s was deleted first", strings.Join(after, ", "), v1.Name)
	return nil
}

// workerHosts lists the hosts the MachineDeployment's Machines run on, sorted.
func (w *World) workerHosts(ctx context.Context) ([]string, error) {
	machines, err := w.Machines(ctx)
	if err != nil {
		return nil, err
	}
	var hosts []string
	for _, m := range machines {
		if m.Group != "control plane" {
			hosts = append(hosts, m.Host)
		}
	}
	slices.Sort(hosts)
	return hosts, nil
}

// rolledOut is true when the control plane is initialized and the MachineDeployment has exactly
// its replicas, all cloned from template, Running with a Node, available and up to date.
func (w *World) rolledOut(template string) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		c := &clusterv1.Cluster{}
		if err := w.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: clusterName}, c); err != nil {
			return false, err
		}
		if !conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition) {
			return false, nil
		}
		md := &clusterv1.MachineDeployment{}
		if err := w.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: mdName}, md); err != nil {
			return false, err
		}
		want := ptr.Deref(md.Spec.Replicas, 0)
		if ptr.Deref(md.Status.AvailableReplicas, 0) != want || ptr.Deref(md.Status.UpToDateReplicas, 0) != want || ptr.Deref(md.Status.Replicas, 0) != want {
			return false, nil
		}
		machines, err := w.Machines(ctx)
		if err != nil {
			return false, err
		}
		workers := int32(0)
		for _, m := range machines {
			if m.Phase != string(clusterv1.MachinePhaseRunning) || m.Node == "" || m.Deleting {
				return false, nil
			}
			if m.Group == "control plane" {
				continue
			}
			if m.Template != template {
				return false, nil
			}
			workers++
		}
		return workers == want, nil
	}
}

// bringUpCluster creates the Cluster with a control-plane Machine and MachineDeployment workers
// (Opts.Workers replicas of tmpl, with the given rollout budget), waits until every Machine runs
// with a Node, and prints them.
func (w *World) bringUpCluster(ctx context.Context, tmpl *infrav1.RedfishMachineTemplate, maxSurge, maxUnavailable int32) (*clusterv1.MachineDeployment, error) {
	rc, cluster := sample.Cluster(Namespace, clusterName, "10.0.0.10")
	cpData, cpInfra, cpMachine := sample.ControlPlane(Namespace, clusterName, clusterName+"-control-plane")
	mdData, md := sample.MachineDeployment(Namespace, clusterName, mdName, tmpl.Name, w.Opts.Workers, maxSurge, maxUnavailable)
	if err := w.Create(ctx, rc, cluster); err != nil {
		return nil, err
	}
	if err := w.Env.CreateKubeconfigSecret(ctx, cluster); err != nil {
		return nil, err
	}
	if err := w.Create(ctx, tmpl, cpData, cpInfra, cpMachine, mdData, md); err != nil {
		return nil, err
	}
	w.Printf("created Cluster %s: a control-plane Machine and MachineDeployment %s (%d replicas, template %s)", clusterName, mdName, w.Opts.Workers, tmpl.Name)
	upStart := w.Since()
	if err := w.Until(ctx, "the cluster to come up", 5*time.Minute, w.rolledOut(tmpl.Name)); err != nil {
		return nil, err
	}
	w.Printf("cluster up in %s: every Machine Running with a Node", (w.Since() - upStart).Round(100*time.Millisecond))
	return md, w.PrintMachines(ctx)
}
