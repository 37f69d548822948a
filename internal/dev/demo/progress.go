package demo

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// hostStates is the order states are listed in.
var hostStates = []infrav1.HostState{
	infrav1.HostStateRegistering, infrav1.HostStateInspecting, infrav1.HostStateAvailable,
	infrav1.HostStateProvisioning, infrav1.HostStateProvisioned, infrav1.HostStateDeprovisioning,
	infrav1.HostStateCleaning, infrav1.HostStateError,
}

// watch prints a progress line whenever hosts, Machines or MachineDeployments change.
func (w *World) watch(ctx context.Context) {
	last := ""
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if line, err := w.progress(ctx); err == nil && line != last {
			w.Printf("  %s", line)
			last = line
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// progress summarises the namespace: hosts by state, Machines by template and phase, and each
// MachineDeployment's replica counts.
func (w *World) progress(ctx context.Context) (string, error) {
	hosts := &infrav1.RedfishHostList{}
	if err := w.List(ctx, hosts, client.InNamespace(Namespace)); err != nil {
		return "", err
	}
	byState := map[infrav1.HostState]int{}
	for _, h := range hosts.Items {
		st := h.Status.State
		if st == "" {
			st = infrav1.HostStateRegistering // not reconciled yet: the controller starts it there
		}
		byState[st]++
	}
	parts := []string{}
	for _, s := range hostStates {
		if n := byState[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	line := "hosts: " + strings.Join(parts, ", ")

	machines, err := w.Machines(ctx)
	if err != nil {
		return "", err
	}
	groups := map[string]map[string]int{}
	for _, m := range machines {
		if groups[m.Group] == nil {
			groups[m.Group] = map[string]int{}
		}
		groups[m.Group][m.Phase]++
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	slices.Sort(names)
	for _, g := range names {
		phases := []string{}
		for p, n := range groups[g] {
			phases = append(phases, fmt.Sprintf("%d %s", n, p))
		}
		slices.Sort(phases)
		line += fmt.Sprintf(" | %s: %s", g, strings.Join(phases, ", "))
	}

	mds := &clusterv1.MachineDeploymentList{}
	if err := w.List(ctx, mds, client.InNamespace(Namespace)); err != nil {
		return "", err
	}
	for _, md := range mds.Items {
		line += fmt.Sprintf(" | MachineDeployment %s: %d/%d available, %d up-to-date", md.Name,
			ptr.Deref(md.Status.AvailableReplicas, 0), ptr.Deref(md.Spec.Replicas, 0), ptr.Deref(md.Status.UpToDateReplicas, 0))
	}
	return line, nil
}

// Machine is one Machine as the demo reports it.
type Machine struct {
	Name, Phase, Host, Template, Image, Node string
	// BMC is the simulator profile of the host's BMC (dmtf, dell-idrac9, …).
	BMC string
	// Group is "control plane" or the RedfishMachineTemplate the machine was cloned from.
	Group    string
	Deleting bool
}

// recordBoot remembers which image a server booted, as its BMC reports the boot (the virtual CD, the
// UEFI HTTP boot URI, or the kernel a network boot loaded), following the seed server's redirect
// to the image itself.
func (w *World) recordBoot(e simulator.BootEvent) {
	var url string
	switch e.Target {
	case "Cd":
		url = e.MediaImage
	case "UefiHttp":
		url = e.HTTPBootURI
	case "Pxe":
		if f := strings.Fields(e.KernelCmdline); len(f) > 0 {
			url = f[0]
		}
	default:
		return // a reboot from disk: the image it installed stays
	}
	go func() {
		if url != "" {
			url = bmc.Redact(resolve(url)) // a seed URL that no longer redirects keeps no token
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.booted == nil {
			w.booted = map[string]bootedImage{}
		}
		if prev, ok := w.booted[e.ServerID]; !ok || !prev.at.After(e.Time) { // the latest boot wins
			w.booted[e.ServerID] = bootedImage{at: e.Time, url: url}
		}
	}()
}

type bootedImage struct {
	at  time.Time
	url string
}

// resolve follows the redirects of url (the seed server's per-claim `image` answers 302 to the
// image) and returns where they end, or url when it cannot be fetched.
func resolve(url string) string {
	c := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for range 5 {
		resp, err := c.Head(url) //nolint:noctx // bounded by the client timeout
		if err != nil {
			return url
		}
		_ = resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode/100 != 3 || loc == "" {
			return url
		}
		url = loc
	}
	return url
}

func (w *World) bootedImage(server string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.booted[server].url
}

// Machines lists the namespace's Machines with their host, template and the image its host booted.
func (w *World) Machines(ctx context.Context) ([]Machine, error) {
	ms := &clusterv1.MachineList{}
	if err := w.List(ctx, ms, client.InNamespace(Namespace)); err != nil {
		return nil, err
	}
	rms := &infrav1.RedfishMachineList{}
	if err := w.List(ctx, rms, client.InNamespace(Namespace)); err != nil {
		return nil, err
	}
	infra := map[string]infrav1.RedfishMachine{}
	for _, rm := range rms.Items {
		infra[rm.Name] = rm
	}
	out := make([]Machine, 0, len(ms.Items))
	for _, m := range ms.Items {
		rm := infra[m.Spec.InfrastructureRef.Name]
		mm := Machine{
			Name: m.Name, Phase: m.Status.Phase, Host: rm.Status.HostRef, Node: m.Status.NodeRef.Name,
			Template: w.templateOf(m.Name, rm.Annotations[clusterv1.TemplateClonedFromNameAnnotation]), Deleting: !m.DeletionTimestamp.IsZero(),
		}
		mm.Image = w.bootedImage(rm.Status.HostRef)
		if img := rm.Spec.Image; img.EffectiveFormat().InstallsToDisk() {
			mm.Image = bmc.Redact(img.URL) // what its drive holds (the last CD it booted was the deploy image)
		}
		for _, s := range w.Fleet.Servers {
			if s.ID() == rm.Status.HostRef {
				mm.BMC = s.Profile().Name
			}
		}
		mm.Group = mm.Template
		if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok {
			mm.Group = "control plane"
		}
		if mm.Phase == "" {
			mm.Phase = "Pending"
		}
		out = append(out, mm)
	}
	slices.SortFunc(out, func(a, b Machine) int { return strings.Compare(a.Group+a.Name, b.Group+b.Name) })
	return out, nil
}

// PrintMachines prints a table of the Machines: where each runs and what.
func (w *World) PrintMachines(ctx context.Context) error {
	ms, err := w.Machines(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		w.Printf("    %-28s %-9s host=%-10s bmc=%-14s node=%-28s image=%s", m.Name, m.Phase, m.Host, m.BMC, m.Node, m.Image)
	}
	return nil
}

// templateOf remembers which template each Machine's RedfishMachine was cloned from, so a Machine
// whose RedfishMachine is already gone still shows under its template.
func (w *World) templateOf(machine, clonedFrom string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.templates == nil {
		w.templates = map[string]string{}
	}
	if clonedFrom != "" {
		w.templates[machine] = clonedFrom
	}
	return w.templates[machine]
}
