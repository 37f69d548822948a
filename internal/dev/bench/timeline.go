package bench

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// timeline records, from watches on the API server and the simulated BMCs, when each thing a
// person would watch first happened to each machine: created, host claimed, server booted, Node
// registered, Machine Running. Times are when this process saw the event.
type timeline struct {
	mu       sync.Mutex
	machines map[string]*machineTimes // by RedfishMachine name (= Machine name for MachineSets)
	boots    map[string][]boot        // server ID → boots
	holder   map[string]string        // host → the machine whose claim it last carried
	// maintenances: when each RedfishMaintenance was first seen Draining and InMaintenance, and
	// the Machine it drains (by name).
	maintenances map[string]*maintenanceSeen
	infraOf      map[string]string // Machine name → its RedfishMachine's (the machines' key)
}

// maintenanceSeen is when the informer first delivered a maintenance in a stage. (The informers of
// maintenances and Machines deliver apart: a stretch between the two is known to within their
// delays.)
type maintenanceSeen struct {
	machine                 string
	draining, inMaintenance time.Time
}

type machineTimes struct {
	created, claimed, node, running time.Time
	deleting, gone                  time.Time
	// Between deleting and gone: CAPI deletes the RedfishMachine (infraDeleting), this provider
	// asks the host to release it (release), the host reports the server off (off) and drops the
	// claim (free).
	infraDeleting, release, off, free time.Time
	host                              string
}

func newTimeline() *timeline {
	return &timeline{machines: map[string]*machineTimes{}, boots: map[string][]boot{}, holder: map[string]string{}, maintenances: map[string]*maintenanceSeen{}, infraOf: map[string]string{}}
}

func (t *timeline) machine(name string) *machineTimes {
	m := t.machines[name]
	if m == nil {
		m = &machineTimes{}
		t.machines[name] = m
	}
	return m
}

func setOnce(at *time.Time, now time.Time) {
	if at.IsZero() {
		*at = now
	}
}

// watch registers the handlers on c's informers.
func (t *timeline) watch(ctx context.Context, c cache.Cache, fleet *simulator.Fleet) error {
	fleet.OnBoot(func(e simulator.BootEvent) {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.boots[e.ServerID] = append(t.boots[e.ServerID], boot{at: e.Time, powerOn: e.PowerOnAt})
	})
	handlers := map[client.Object]func(obj any){
		&clusterv1.Machine{}: func(obj any) {
			m, ok := obj.(*clusterv1.Machine)
			if !ok || m.Spec.InfrastructureRef.Kind != "RedfishMachine" {
				return
			}
			now := time.Now()
			t.mu.Lock()
			defer t.mu.Unlock()
			t.infraOf[m.Name] = m.Spec.InfrastructureRef.Name
			mt := t.machine(m.Spec.InfrastructureRef.Name)
			setOnce(&mt.created, now)
			if m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Status.NodeRef.IsDefined() {
				setOnce(&mt.running, now)
			}
			if !m.DeletionTimestamp.IsZero() {
				setOnce(&mt.deleting, now)
			}
		},
		&infrav1.RedfishMachine{}: func(obj any) {
			rm, ok := obj.(*infrav1.RedfishMachine)
			if !ok || rm.DeletionTimestamp.IsZero() {
				return
			}
			now := time.Now()
			t.mu.Lock()
			defer t.mu.Unlock()
			setOnce(&t.machine(rm.Name).infraDeleting, now)
		},
		&infrav1.RedfishHost{}: func(obj any) {
			h, ok := obj.(*infrav1.RedfishHost)
			if !ok {
				return
			}
			now := time.Now()
			t.mu.Lock()
			defer t.mu.Unlock()
			c := h.Status.Claim
			if last := t.holder[h.Name]; last != "" && (c == nil || c.Consumer.Name != last) {
				setOnce(&t.machine(last).free, now)
				delete(t.holder, h.Name)
			}
			if c == nil || c.Consumer.Name == "" {
				return
			}
			mt := t.machine(c.Consumer.Name)
			t.holder[h.Name] = c.Consumer.Name
			if mt.claimed.IsZero() {
				mt.claimed, mt.host = now, h.Name
			}
			if c.Release {
				setOnce(&mt.release, now)
				if h.Status.PowerState == "Off" {
					setOnce(&mt.off, now)
				}
			}
		},
		&expv1.RedfishMaintenance{}: func(obj any) {
			m, ok := obj.(*expv1.RedfishMaintenance)
			if !ok {
				return
			}
			now := time.Now()
			t.mu.Lock()
			defer t.mu.Unlock()
			ms := t.maintenances[m.Name]
			if ms == nil {
				ms = &maintenanceSeen{}
				t.maintenances[m.Name] = ms
			}
			if ms.machine == "" {
				ms.machine = m.Status.Machine
			}
			switch m.Status.Stage {
			case expv1.StageDraining:
				setOnce(&ms.draining, now)
			case expv1.StageInMaintenance:
				setOnce(&ms.inMaintenance, now)
			}
		},
		&corev1.Node{}: func(obj any) {
			n, ok := obj.(*corev1.Node)
			if !ok {
				return
			}
			// redfish://<namespace>/<host>/<machine>
			parts := strings.Split(strings.TrimPrefix(n.Spec.ProviderID, "redfish://"), "/")
			if len(parts) != 3 {
				return
			}
			now := time.Now()
			t.mu.Lock()
			defer t.mu.Unlock()
			setOnce(&t.machine(parts[2]).node, now)
		},
	}
	for obj, h := range handlers {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    h,
			UpdateFunc: func(_, obj any) { h(obj) },
			DeleteFunc: t.deleted,
		}); err != nil {
			return err
		}
	}
	return nil
}

// deleted records when a Machine was gone from the API server.
func (t *timeline) deleted(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*clusterv1.Machine)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	setOnce(&t.machine(m.Spec.InfrastructureRef.Name).gone, now)
}

// boot is a server's boot as the simulator reported it: when it powered on (its boot started)
// and when that power-on began.
type boot struct{ at, powerOn time.Time }

// split is the per-machine breakdown of the machines created in [from, to).
type split struct {
	Machines int `json:"machines"`
	// Created: phase start → Machine created (CAPI's MachineDeployment and MachineSet controllers
	// creating the Machines, and the rollout's pacing).
	Created stat `json:"created"`
	// WaitForHost: Machine created → host claimed (CAPI creating the RedfishMachine, the claim,
	// and waiting for a host to become Available).
	WaitForHost stat `json:"waitForHost"`
	// Provider: host claimed → Node registered: this provider's part, power-on and OS boot included.
	Provider stat `json:"provider"`
	// ProviderOverhead: Provider minus the simulated power-on latency and OS boot time.
	ProviderOverhead stat `json:"providerOverhead"`
	// PoweredOn: host claimed → the server finished powering on (its boot started); PowerOnSent:
	// host claimed → the power-on began (the BMC accepted it, the boot prepared: media, boot
	// override; for a restart, its power-off ended).
	PoweredOn   stat `json:"poweredOn"`
	PowerOnSent stat `json:"powerOnSent"`
	// NodeToRunning: Node registered → Machine Running (CAPI's Machine controller and ClusterCache).
	NodeToRunning stat `json:"nodeToRunning"`
	// Deleted counts the Machines deleted in the window; Deletion is deletion requested → Machine
	// gone (CAPI's drain and this provider's release: power off before the finalizer goes).
	Deleted  int  `json:"deleted"`
	Deletion stat `json:"deletion"`
	// The deletion's steps, for the DeletionSteps Machines whose every step was seen:
	// ToInfraDeletion, deletion requested → RedfishMachine deleted (CAPI: drain, volume detach,
	// hooks); ToRelease → this provider asks the host to release it; ToOff → the host reports the
	// server off; ToFree → the host drops the claim (erased, released); ToGone → the Machine is gone
	// (this provider removing the RedfishMachine's finalizer after a last list of the hosts, CAPI
	// deleting the Node and the Machine).
	DeletionSteps   int  `json:"deletionSteps"`
	ToInfraDeletion stat `json:"toInfraDeletion"`
	ToRelease       stat `json:"toRelease"`
	ToOff           stat `json:"toOff"`
	ToFree          stat `json:"toFree"`
	ToGone          stat `json:"toGone"`
}

// stat summarises durations in seconds.
type stat struct {
	Median float64 `json:"median"`
	P95    float64 `json:"p95"`
	Max    float64 `json:"max"`
}

func summarize(ds []time.Duration) stat {
	if len(ds) == 0 {
		return stat{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 { return ds[min(len(ds)-1, int(q*float64(len(ds))))].Seconds() }
	return stat{Median: at(0.5), P95: at(0.95), Max: ds[len(ds)-1].Seconds()}
}

func (t *timeline) split(from, to time.Time, floorPerMachine time.Duration) split {
	t.mu.Lock()
	defer t.mu.Unlock()
	var created, wait, prov, over, on, sent, run, del, toInfra, toRelease, toOff, toFree, toGone []time.Duration
	n := 0
	for _, m := range t.machines {
		if !m.deleting.Before(from) && m.deleting.Before(to) && !m.gone.IsZero() {
			del = append(del, m.gone.Sub(m.deleting))
			if !m.infraDeleting.IsZero() && !m.release.IsZero() && !m.off.IsZero() && !m.free.IsZero() {
				toInfra = append(toInfra, m.infraDeleting.Sub(m.deleting))
				toRelease = append(toRelease, m.release.Sub(m.infraDeleting))
				toOff = append(toOff, m.off.Sub(m.release))
				toFree = append(toFree, m.free.Sub(m.off))
				toGone = append(toGone, m.gone.Sub(m.free))
			}
		}
		if m.created.Before(from) || !m.created.Before(to) || m.claimed.IsZero() || m.node.IsZero() || m.running.IsZero() {
			continue
		}
		n++
		created = append(created, m.created.Sub(from))
		wait = append(wait, m.claimed.Sub(m.created))
		prov = append(prov, m.node.Sub(m.claimed))
		over = append(over, m.node.Sub(m.claimed)-floorPerMachine)
		for _, b := range t.boots[m.host] {
			// The boot whose power-on began after the claim: one already under way is not this
			// machine's.
			if !b.powerOn.Before(m.claimed) {
				on = append(on, b.at.Sub(m.claimed))
				sent = append(sent, b.powerOn.Sub(m.claimed))
				break
			}
		}
		run = append(run, m.running.Sub(m.node))
	}
	return split{Machines: n, Created: summarize(created), WaitForHost: summarize(wait), Provider: summarize(prov), ProviderOverhead: summarize(over),
		PoweredOn: summarize(on), PowerOnSent: summarize(sent), NodeToRunning: summarize(run), Deleted: len(del), Deletion: summarize(del),
		DeletionSteps: len(toInfra), ToInfraDeletion: summarize(toInfra), ToRelease: summarize(toRelease), ToOff: summarize(toOff), ToFree: summarize(toFree), ToGone: summarize(toGone)}
}

// maintenanceRounds are the maintenance controller's own stretches of Draining → InMaintenance,
// from the informers' times: Draining → its Machine's deletion requested (the round after the
// start deletes it), and the host erased and released → InMaintenance (the round that sees it).
func (t *timeline) maintenanceRounds() (toDeletion, toInMaintenance []time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ms := range t.maintenances {
		mt := t.machines[t.infraOf[ms.machine]]
		if ms.machine == "" || mt == nil {
			continue
		}
		if !ms.draining.IsZero() && !mt.deleting.IsZero() {
			toDeletion = append(toDeletion, mt.deleting.Sub(ms.draining))
		}
		if !ms.inMaintenance.IsZero() && !mt.free.IsZero() {
			toInMaintenance = append(toInMaintenance, ms.inMaintenance.Sub(mt.free))
		}
	}
	return toDeletion, toInMaintenance
}
