package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stmcginnis/gofish/schemas"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/internal/apireads"
	"github.com/caprf/cluster-api-provider-redfish/internal/fresh"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

// fakeBMC is a BMC whose answers a test sets; it records every call but PowerState (which each
// reconcile makes to check the BMC).
type fakeBMC struct {
	power      bmc.PowerState
	errs       map[string]error // by method name, or method and argument ("Reset(ForceOff)")
	eraseJobs  []bmc.EraseJob
	tasks      map[string]*bmc.Task
	inProgress int
	calls      []string
	resetting  func()   // when set, runs as a reset is sent
	preparing  func()   // when set, runs as a boot override is set
	powerReads int      // reads of the power state: PowerState, and Reset (which reads it again)
	follows    bool     // when set, an accepted reset moves the power state as a server would
	inserted   []string // the URLs of every InsertMedia
}

func (f *fakeBMC) call(method, arg string) error {
	if arg != "" {
		method += "(" + arg + ")"
	}
	f.calls = append(f.calls, method)
	if err, ok := f.errs[method]; ok {
		return err
	}
	return f.errs[strings.SplitN(method, "(", 2)[0]]
}

func (f *fakeBMC) PowerState(context.Context) (bmc.PowerState, error) {
	f.powerReads++
	return f.power, nil
}
func (f *fakeBMC) Reset(ctx context.Context, t bmc.ResetType) error {
	f.powerReads++
	return f.ResetFrom(ctx, t, f.power)
}
func (f *fakeBMC) ResetFrom(_ context.Context, t bmc.ResetType, _ bmc.PowerState) error {
	if f.resetting != nil {
		f.resetting()
	}
	err := f.call("Reset", string(t))
	if err == nil && f.follows {
		switch t {
		case bmc.ResetForceOff, bmc.ResetGracefulShutdown:
			f.power = bmc.PowerOff
		default:
			f.power = bmc.PowerOn
		}
	}
	return err
}
func (f *fakeBMC) Inventory(context.Context) (*infrav1.Inventory, error) {
	return &infrav1.Inventory{Manufacturer: "Sim", CPUCores: 8}, f.call("Inventory", "")
}
func (f *fakeBMC) SetBootOverride(_ context.Context, o bmc.BootOverride) error {
	if f.preparing != nil {
		f.preparing()
	}
	if o.Continuous {
		return f.call("SetBootOverride", string(o.Target)+",Continuous")
	}
	return f.call("SetBootOverride", string(o.Target))
}
func (f *fakeBMC) InsertMedia(_ context.Context, image, seed string) error {
	f.inserted = append(f.inserted, image, seed)
	return f.call("InsertMedia", lastPart(image)+","+lastPart(seed))
}
func (f *fakeBMC) EjectMedia(_ context.Context, match string) error {
	return f.call("EjectMedia", match)
}
func (f *fakeBMC) EraseDrives(_ context.Context, exempt, expected []string) ([]bmc.EraseJob, error) {
	arg := strings.Join(exempt, ",")
	if len(expected) > 0 {
		arg += "|expected " + strings.Join(expected, ",")
	}
	return f.eraseJobs, f.call("EraseDrives", arg)
}
func (f *fakeBMC) ErasesInProgress(context.Context, []string) (int, error) {
	return f.inProgress, f.call("ErasesInProgress", "")
}
func (f *fakeBMC) BootProgress(context.Context) (string, time.Time, error) {
	return "", time.Time{}, f.call("BootProgress", "")
}
func (f *fakeBMC) TaskStatus(_ context.Context, uri string) (*bmc.Task, error) {
	return f.tasks[uri], f.call("TaskStatus", uri)
}

func lastPart(url string) string { return url[strings.LastIndex(url, "/")+1:] }

type fakeBMCs struct {
	bmc *fakeBMC
	err error
	// connecting, when set, runs at each connection (a BMC session in the pool).
	connecting func()
	// forgot, when set, records each ForgetOwned as "<address> <owner>".
	forgot *[]string
}

func (f fakeBMCs) Get(context.Context, bmc.Target) (BMC, error) {
	if f.connecting != nil {
		f.connecting()
	}
	if f.err != nil {
		return nil, f.err
	}
	return f.bmc, nil
}
func (f fakeBMCs) ForgetOwned(address, owner string) {
	if f.forgot != nil {
		*f.forgot = append(*f.forgot, address+" "+owner)
	}
}

func claimOf(state infrav1.HostState, mutate ...func(*infrav1.HostClaim)) func(*infrav1.RedfishHost) {
	return func(h *infrav1.RedfishHost) {
		h.Status.State = state
		h.Status.Claim = &infrav1.HostClaim{
			Consumer: infrav1.ObjectRef{APIGroup: infrav1.GroupVersion.Group, Kind: "RedfishMachine", Namespace: "ns", Name: "m1"}, ConsumerUID: "uid-m1",
			Owner:                 &infrav1.ObjectRef{APIGroup: clusterv1.GroupVersion.Group, Kind: "MachineDeployment", Namespace: "ns", Name: "workers"},
			AutomatedCleaningMode: infrav1.CleaningModeMetadata, BootMethod: infrav1.BootMethodVirtualMedia,
		}
		for _, m := range mutate {
			m(h.Status.Claim)
		}
	}
}

// TestHostStateMachine runs one reconcile of a host in each state against a fake BMC and checks
// the state it moves to, what it asked of the BMC, and the condition a user reads.
func TestHostStateMachine(t *testing.T) {
	const (
		poll, retry, check = 2 * time.Second, 30 * time.Second, time.Minute
		// firstLook: a power action's outcome and a fresh erase are looked at sooner than poll,
		// then less and less often.
		firstLook = poll / 4
	)
	booted := func(h *infrav1.RedfishHost) { now := metav1.Now(); h.Status.BootIssuedAt = &now }
	liveBooted := func(ago time.Duration) func(*infrav1.RedfishHost) {
		return func(h *infrav1.RedfishHost) { h.Status.LiveBootIssuedAt = &metav1.Time{Time: time.Now().Add(-ago)} }
	}
	liveBootRecordedNow := func(t *testing.T, h *infrav1.RedfishHost) {
		if at := h.Status.LiveBootIssuedAt; at == nil || time.Since(at.Time) > time.Minute {
			t.Errorf("liveBootIssuedAt %v, want now", at)
		}
	}
	erasing := func(tasks ...string) func(*infrav1.RedfishHost) {
		return func(h *infrav1.RedfishHost) {
			h.Status.Erase = &infrav1.EraseStatus{StartedAt: metav1.Now(), Drives: []string{"/d/1", "/d/2"}, Tasks: tasks}
		}
	}
	type want struct {
		state     infrav1.HostState
		calls     []string // BMC calls in order (PowerState excluded)
		condition string   // "Type=Status/Reason" that must hold, or "" for none
		requeue   time.Duration
		noRequeue bool // waits for a change, no timer
		check     func(t *testing.T, h *infrav1.RedfishHost)
	}
	for _, tc := range []struct {
		name   string
		host   []func(*infrav1.RedfishHost)
		rm     func(*infrav1.RedfishMachine) // the claim's consumer m1
		bmc    fakeBMC
		getErr error
		sentOn bool // a power-on was sent to the host moments before the round
		want   want
	}{
		{name: "registering: the BMC answers, the host is inspected in the same round and offered",
			bmc: fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"Inventory"}, condition: "BMCReachable=True/Ready", check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Status.RegisteredAddress != h.Spec.BMC.Address {
					t.Errorf("registeredAddress %q", h.Status.RegisteredAddress)
				}
			}}},
		{name: "registering: credentials refused, retried later",
			getErr: bmc.ErrAuth,
			want:   want{state: infrav1.HostStateRegistering, condition: "BMCReachable=False/AuthenticationFailed", requeue: retry}},
		{name: "registering: the BMC's sessions are used up, the host says so and retries later",
			getErr: bmc.ErrSessionLimit,
			want:   want{state: infrav1.HostStateRegistering, condition: "BMCReachable=False/SessionLimitExceeded", requeue: retry}},
		{name: "registering: the connection is still being made, polled soon without a verdict",
			getErr: bmc.ErrConnecting,
			want:   want{state: infrav1.HostStateRegistering, requeue: poll, check: noCondition(infrav1.BMCReachableCondition)}},
		{name: "an address fixed after Error, the connection still being made: registering again, polled soon",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) {
				h.Status.State = infrav1.HostStateError
				conditions.Set(h, metav1.Condition{Type: infrav1.BMCReachableCondition, Status: metav1.ConditionFalse, Reason: infrav1.BMCAddressInvalidReason})
			}},
			getErr: bmc.ErrConnecting,
			want:   want{state: infrav1.HostStateRegistering, condition: "BMCReachable=Unknown/Connecting", requeue: poll}},
		{name: "an address that cannot work: Error until the spec changes",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) { h.Spec.BMC.Address = "ftp://10.0.0.1" }},
			want: want{state: infrav1.HostStateError, condition: "BMCReachable=False/InvalidAddress", noRequeue: true}},
		{name: "inspecting a powered-off server: inventory read, offered",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) { h.Status.State = infrav1.HostStateInspecting }},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"Inventory"}, condition: "Inspected=True/Inspected"}},
		{name: "inspecting a running server no machine names: held back for its machine to come back",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) { h.Status.State = infrav1.HostStateInspecting }},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateInspecting, calls: []string{"Inventory"}, requeue: poll, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Status.RestoreWaitSince == nil {
					t.Error("restoreWaitSince not recorded")
				}
			}}},
		{name: "available and claimed: provisioning starts in the same round, the boot stored, then the power-on",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateAvailable)},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"InsertMedia(image,cidata.iso)", "SetBootOverride(Cd)", "Reset(On)"}, condition: "BootPrepared=True/Ready",
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.BootIssuedAt == nil {
						t.Error("bootIssuedAt not recorded")
					}
					if got := h.Annotations[infrav1.HostClaimedByAnnotation]; got != "m1" {
						t.Errorf("claim record %q, want m1 (a move or restore must find it)", got)
					}
				}}},

		{name: "available, online wanted and off: powered on",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) {
				h.Status.State = infrav1.HostStateAvailable
				h.Spec.Online = new(bool)
				*h.Spec.Online = true
			}},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"Reset(On)"}}},
		{name: "provisioning a running server: forced off first",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning)},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"Reset(ForceOff)"}, requeue: firstLook}},
		{name: "provisioning by virtual media: image and seed volume inserted, the boot stored, then the power-on",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning)},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"InsertMedia(image,cidata.iso)", "SetBootOverride(Cd)", "Reset(On)"}, condition: "BootPrepared=True/Ready",
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.BootIssuedAt == nil {
						t.Error("bootIssuedAt not recorded")
					}
				}}},
		{name: "provisioning by virtual media on a single-slot BMC: a condition naming PXE and UefiHttp, no boot",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning)},
			bmc:  fakeBMC{power: bmc.PowerOff, errs: map[string]error{"InsertMedia": bmc.ErrNoSeedSlot}},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"InsertMedia(image,cidata.iso)"}, condition: "BootPrepared=False/NoSeedMediaSlot", requeue: retry,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.BootIssuedAt != nil {
						t.Error("a boot was recorded")
					}
					if m := conditions.Get(h, infrav1.BootPreparedCondition).Message; !strings.Contains(m, "PXE") || !strings.Contains(m, "UefiHttp") {
						t.Errorf("the condition does not name the alternatives: %s", m)
					}
				}}},
		{name: "provisioning by PXE: one-time network boot, no media",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning, func(c *infrav1.HostClaim) { c.BootMethod = infrav1.BootMethodPXE })},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"SetBootOverride(Pxe)", "Reset(On)"}}},
		{name: "provisioning by UEFI HTTP: the seed volume in virtual media, the image from the boot URI",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning, func(c *infrav1.HostClaim) { c.BootMethod = infrav1.BootMethodUefiHTTP })},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"InsertMedia(,cidata.iso)", "SetBootOverride(UefiHttp)", "Reset(On)"}, condition: "BootPrepared=True/Ready"}},
		{name: "provisioning by UEFI HTTP on a BMC without virtual media: a condition naming PXE, no boot",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning, func(c *infrav1.HostClaim) { c.BootMethod = infrav1.BootMethodUefiHTTP })},
			bmc:  fakeBMC{power: bmc.PowerOff, errs: map[string]error{"InsertMedia": bmc.ErrNoSeedSlot}},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"InsertMedia(,cidata.iso)"}, condition: "BootPrepared=False/NoSeedMediaSlot", requeue: retry,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.BootIssuedAt != nil {
						t.Error("a boot was recorded")
					}
				}}},
		{name: "provisioning while the BMC is busy (in POST): prepared again soon, nothing recorded",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning, func(c *infrav1.HostClaim) { c.BootMethod = infrav1.BootMethodPXE })},
			bmc:  fakeBMC{power: bmc.PowerOff, errs: map[string]error{"SetBootOverride": bmc.ErrConflict}},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"SetBootOverride(Pxe)"}, condition: "BootPrepared=False/BMCBusy", requeue: poll, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Status.BootIssuedAt != nil {
					t.Error("a boot was recorded")
				}
			}}},
		{name: "boot recorded, server off: the one power-on",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning), booted},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioning, calls: []string{"Reset(On)"}, requeue: firstLook}},
		{name: "boot recorded, server on (the power-on's answer was lost): nothing sent again",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning), booted},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioning, requeue: check}},
		// A held host waits for its reboot requests to go (a spec change, which wakes it): its BMC is
		// read at the check interval meanwhile, not polled.
		{name: "provisioning while a reboot request holds the power: no boot prepared, nothing powered on, no polling",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning), func(h *infrav1.RedfishHost) {
				h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "ops/psu-check", Mode: infrav1.RebootModeHard}}
			}},
			bmc: fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioning, requeue: check, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Status.BootIssuedAt != nil {
					t.Error("a boot was recorded")
				}
			}}},
		{name: "boot recorded, server off, a reboot request arrived meanwhile: the power-on waits, no polling",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning), booted, func(h *infrav1.RedfishHost) {
				h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "maintenance/dimm", Mode: infrav1.RebootModeHard}}
			}},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioning, requeue: check}},
		{name: "provisioned, held off by a reboot request and off: nothing to do until the request goes, no polling",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), func(h *infrav1.RedfishHost) {
				h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "maintenance/bios", Mode: infrav1.RebootModeHard}}
				h.Status.PowerState = string(bmc.PowerOff)
			}},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioned, requeue: check}},
		// A live OS keeps nothing across a power-off: each power-on the provider sends boots the
		// image with its seed, attached again whatever booted meanwhile.
		{name: "provisioned live image found off, no live boot recorded: the boot recorded first (the seed server's window opened), no medium named yet",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), booted},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioned, requeue: poll, check: liveBootRecordedNow}},
		{name: "provisioned live image found off, a live boot recorded half a window ago: recorded anew first",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), booted, liveBooted(seed.LiveBootWindow/2 + time.Minute)},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioned, requeue: poll, check: liveBootRecordedNow}},
		{name: "provisioned live image found off, its boot recorded: the ISO and seed volume attached again, the override to the CD, then powered on",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), booted, liveBooted(time.Second)},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"InsertMedia(image,cidata.iso)", "SetBootOverride(Cd)", "Reset(On)"}, requeue: firstLook, condition: "BootPrepared=True/Ready"}},
		{name: "provisioned live image found off, a power-on sent moments ago (the BMC still says Off): not prepared again",
			host:   []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), booted, liveBooted(time.Second)},
			bmc:    fakeBMC{power: bmc.PowerOff},
			sentOn: true,
			want:   want{state: infrav1.HostStateProvisioned}},
		{name: "provisioned live image by PXE found off, its boot recorded: the network boot set again, then powered on",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned, c.BootMethod = true, infrav1.BootMethodPXE }), booted, liveBooted(time.Second)},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"SetBootOverride(Pxe)", "Reset(On)"}, requeue: firstLook}},
		{name: "provisioned live image found off, its boot recorded, the BMC busy: nothing powered on, tried again soon",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), booted, liveBooted(time.Second)},
			bmc:  fakeBMC{power: bmc.PowerOff, errs: map[string]error{"SetBootOverride": bmc.ErrConflict}},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"InsertMedia(image,cidata.iso)", "SetBootOverride(Cd)"}, requeue: poll}},
		{name: "provisioned live image on, its boot's window closed: its media ejected, the boot record cleared",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), booted, liveBooted(seed.LiveBootWindow + time.Second)},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"EjectMedia(/v1/ns/m1/)"}, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Status.LiveBootIssuedAt != nil {
					t.Error("liveBootIssuedAt kept")
				}
			}}},
		{name: "provisioned live image on, its boot's window still open: its media stay",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), booted, liveBooted(time.Minute)},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioned, requeue: check}},
		{name: "provisioned disk image found off: powered on from its drive, no media",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) {
				c.Provisioned, c.Image = true, &infrav1.Image{URL: "https://images.example/node.raw", Checksum: strings.Repeat("a", 64)}
			}), booted},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"Reset(On)"}, requeue: firstLook}},
		{name: "provisioning, the live image's Node joined: provisioned, the claim's media ejected (the seed is no longer served)",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioning, func(c *infrav1.HostClaim) { c.Provisioned = true }), booted},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"EjectMedia(/v1/ns/m1/)"}}},
		{name: "provisioned with a Hard reboot request: forced off",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned = true }), func(h *infrav1.RedfishHost) {
				h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "maintenance/bios", Mode: infrav1.RebootModeHard}}
			}},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"Reset(ForceOff)"}, requeue: firstLook}},
		{name: "provisioned, its machine recreated (new UID, providerID naming the host): the claim passes to it",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned, c.ConsumerUID = true, "uid-old" })},
			rm:   func(rm *infrav1.RedfishMachine) { rm.Spec.ProviderID = "redfish://ns/h1/m1" },
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioned, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if c := h.Status.Claim; c == nil || c.ConsumerUID != "uid-m1" || c.ConsumerMissingSince != nil {
					t.Errorf("claim %+v, want it adopted by uid-m1", c)
				}
			}}},
		{name: "provisioned, another machine under its machine's name: the consumer counts as gone",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Provisioned, c.ConsumerUID = true, "uid-old" })},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioned, requeue: 2 * time.Minute, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if c := h.Status.Claim; c == nil || c.ConsumerUID != "uid-old" || c.ConsumerMissingSince == nil {
					t.Errorf("claim %+v, want the consumer missing since now", c)
				}
			}}},
		// A providerID is anyone's to write: it restores nothing on a host whose record names no
		// machine (a new server, or one released and cleaned).
		{name: "available, a machine's providerID names it without the host's record: nothing restored",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) { h.Status.State = infrav1.HostStateAvailable }},
			rm: func(rm *infrav1.RedfishMachine) {
				rm.Spec.ProviderID = "redfish://ns/h1/m1"
				rm.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "m1", UID: "uid-machine"}}
			},
			bmc: fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateAvailable, requeue: check, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if c := h.Status.Claim; c != nil {
					t.Errorf("claim %+v restored from a providerID alone", c)
				}
			}}},
		{name: "inspecting a host recreated with its record, its machine's providerID names it: the claim restored, provisioned without a boot",
			host: []func(*infrav1.RedfishHost){recreatedClaimedBy("m1")},
			rm: func(rm *infrav1.RedfishMachine) {
				rm.Spec.ProviderID = "redfish://ns/h1/m1"
				rm.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "m1", UID: "uid-machine"}}
			},
			bmc: fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"Inventory"}, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if c := h.Status.Claim; c == nil || c.ConsumerUID != "uid-m1" || !c.Provisioned {
					t.Errorf("claim %+v, want restored for uid-m1 and provisioned", c)
				}
			}}},
		{name: "inspecting a host recreated with its record, another machine's providerID names it: not restored, not offered",
			host: []func(*infrav1.RedfishHost){recreatedClaimedBy("m0")},
			rm: func(rm *infrav1.RedfishMachine) {
				rm.Spec.ProviderID = "redfish://ns/h1/m1"
				rm.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "m1", UID: "uid-machine"}}
			},
			bmc: fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateInspecting, calls: []string{"Inventory"}, requeue: poll, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Status.Claim != nil || h.Status.RestoreWaitSince == nil || h.Annotations[infrav1.HostClaimedByAnnotation] != "m0" {
					t.Errorf("claim %+v, restoreWaitSince %v, record %q: want none, waiting, m0 kept", h.Status.Claim, h.Status.RestoreWaitSince, h.Annotations[infrav1.HostClaimedByAnnotation])
				}
			}}},
		{name: "inspecting a host recreated with its record, the grace period over without its machine: cleaned before it is offered",
			host: []func(*infrav1.RedfishHost){recreatedClaimedBy("m0"), func(h *infrav1.RedfishHost) {
				long := metav1.NewTime(time.Now().Add(-time.Hour))
				h.Status.RestoreWaitSince = &long
			}},
			bmc: fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateDeprovisioning, calls: []string{"Inventory"}, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Annotations[infrav1.HostClaimedByAnnotation] != "m0" {
					t.Errorf("record %q, want kept until the erase ended", h.Annotations[infrav1.HostClaimedByAnnotation])
				}
			}}},
		{name: "inspecting a host recreated with a reservation record: reserved again, then offered to that owner only",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) {
				h.Status.State = infrav1.HostStateInspecting
				h.Annotations = map[string]string{infrav1.HostReservedForAnnotation: `{"apiGroup":"cluster.x-k8s.io","kind":"MachineDeployment","namespace":"ns","name":"workers"}`}
			}},
			bmc: fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"Inventory"}, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if rf := h.Status.ReservedFor; rf == nil || rf.Kind != "MachineDeployment" || rf.Name != "workers" {
					t.Errorf("reservedFor %+v, want MachineDeployment workers", rf)
				}
			}}},
		{name: "inspecting a host recreated with a reservation record that does not parse: cleaned",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) {
				h.Status.State = infrav1.HostStateInspecting
				h.Annotations = map[string]string{infrav1.HostReservedForAnnotation: `{"kind":`}
			}},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateDeprovisioning, calls: []string{"Inventory"}}},
		// A release is one round per step the BMC takes (the power-off, the erase), not one more
		// round per state for the write of the state before it.
		{name: "provisioned, claim released: deprovisioning, the power-off sent in the same round",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Release = true })},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateDeprovisioning, calls: []string{"Reset(ForceOff)"}, requeue: firstLook}},
		{name: "deprovisioning, off: the claim's media ejected, the erase started in the same round",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateDeprovisioning, func(c *infrav1.HostClaim) { c.Release = true }), booted},
			bmc:  fakeBMC{power: bmc.PowerOff, eraseJobs: []bmc.EraseJob{{Drive: "/d/1", TaskURI: "/t/1"}}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"EjectMedia(/v1/ns/m1/)", "EraseDrives"}, condition: "Cleaned=False/Erasing", requeue: firstLook,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.BootIssuedAt != nil {
						t.Error("bootIssuedAt kept")
					}
					if e := h.Status.Erase; e == nil || !slices.Equal(e.Tasks, []string{"/t/1"}) {
						t.Errorf("erase status %+v", e)
					}
				}}},
		{name: "deprovisioning without cleaning, nodeReuse: back in the pool, reserved for the owner",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateDeprovisioning, func(c *infrav1.HostClaim) {
				c.Release, c.NodeReuse, c.AutomatedCleaningMode = true, true, infrav1.CleaningModeDisabled
			})},
			bmc: fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"EjectMedia(/v1/ns/m1/)"}, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Status.Claim != nil || h.Status.ReservedFor == nil || h.Status.ReservedFor.Name != "workers" {
					t.Errorf("claim %v, reservedFor %v", h.Status.Claim, h.Status.ReservedFor)
				}
				if _, ok := h.Annotations[infrav1.HostClaimedByAnnotation]; ok || !strings.Contains(h.Annotations[infrav1.HostReservedForAnnotation], `"name":"workers"`) {
					t.Errorf("records %v, want the reservation alone", h.Annotations)
				}
			}}},
		{name: "cleaning a server with nothing Redfish can erase: kept out of the pool, saying so",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true })},
			bmc:  fakeBMC{power: bmc.PowerOff, errs: map[string]error{"EraseDrives": bmc.ErrNothingToErase}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"EraseDrives"}, condition: "Cleaned=False/NothingToErase", requeue: retry}},
		{name: "cleaning a server with one drive that cannot be erased: nothing released, the condition names the drive",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true })},
			bmc:  fakeBMC{power: bmc.PowerOff, errs: map[string]error{"EraseDrives": fmt.Errorf("%w: Disk1 (serial S-1)", bmc.ErrDrivesNotErasable)}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"EraseDrives"}, condition: "Cleaned=False/DrivesNotErasable", requeue: retry,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if c := conditions.Get(h, infrav1.CleanedCondition); c == nil || !strings.Contains(c.Message, "Disk1 (serial S-1)") || !strings.Contains(c.Message, "unerasedDrivesAccepted") {
						t.Errorf("condition %+v; want it to name Disk1 and the override", c)
					}
					if h.Status.Claim == nil || h.Status.Erase != nil {
						t.Errorf("claim %+v, erase %+v: want the claim kept and no erase recorded", h.Status.Claim, h.Status.Erase)
					}
				}}},
		{name: "cleaning with a drive inspection recorded that the BMC does not list: nothing released, the condition says so",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true }), func(h *infrav1.RedfishHost) {
				h.Status.Inventory = &infrav1.Inventory{Drives: []infrav1.Drive{{Name: "Disk0", SerialNumber: "S-0"}, {Name: "Disk1", SerialNumber: "S-1"}}}
			}},
			bmc: fakeBMC{power: bmc.PowerOff, errs: map[string]error{"EraseDrives": fmt.Errorf("%w: serials S-1 (none was erased)", bmc.ErrDrivesMissing)}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"EraseDrives(|expected S-0,S-1)"}, condition: "Cleaned=False/DrivesMissing", requeue: retry,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.Claim == nil || h.Status.Erase != nil {
						t.Errorf("claim %+v, erase %+v: want the claim kept and no erase recorded", h.Status.Claim, h.Status.Erase)
					}
				}}},
		{name: "cleaning passes the drives the operator accepts unerased to the BMC",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true }), func(h *infrav1.RedfishHost) {
				h.Spec.UnerasedDrivesAccepted = []string{"S-1", "Disk9"}
			}},
			bmc:  fakeBMC{power: bmc.PowerOff, eraseJobs: []bmc.EraseJob{{Drive: "/d/0", TaskURI: "/t/0"}}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"EraseDrives(S-1,Disk9)"}, condition: "Cleaned=False/Erasing", requeue: firstLook}},
		{name: "cleaning starts the erases and records their tasks",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true })},
			bmc:  fakeBMC{power: bmc.PowerOff, eraseJobs: []bmc.EraseJob{{Drive: "/d/1", TaskURI: "/t/1"}, {Drive: "/d/2"}}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"EraseDrives"}, condition: "Cleaned=False/Erasing", requeue: firstLook,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if e := h.Status.Erase; e == nil || !slices.Equal(e.Drives, []string{"/d/1", "/d/2"}) || !slices.Equal(e.Tasks, []string{"/t/1"}) {
						t.Errorf("erase status %+v", e)
					}
				}}},
		{name: "cleaning waits for an erase still running",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true }), erasing("/t/1")},
			bmc:  fakeBMC{power: bmc.PowerOff, tasks: map[string]*bmc.Task{"/t/1": {State: "Running"}}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"TaskStatus(/t/1)"}, condition: "Cleaned=False/Erasing", requeue: firstLook}},
		{name: "an erase running for 10 minutes is read every 30 s, not every poll",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true }), erasing("/t/1"), func(h *infrav1.RedfishHost) {
				h.Status.Erase.StartedAt = metav1.NewTime(time.Now().Add(-10 * time.Minute))
			}},
			bmc:  fakeBMC{power: bmc.PowerOff, tasks: map[string]*bmc.Task{"/t/1": {State: "Running"}}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"TaskStatus(/t/1)"}, condition: "Cleaned=False/Erasing", requeue: 30 * time.Second}},
		{name: "a failed erase starts over",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true }), erasing("/t/1")},
			bmc:  fakeBMC{power: bmc.PowerOff, tasks: map[string]*bmc.Task{"/t/1": {State: "Exception", Done: true, Failed: true}}},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"TaskStatus(/t/1)"}, condition: "Cleaned=False/EraseFailed", requeue: retry,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.Erase != nil {
						t.Error("the failed erase is kept: it would never be started again")
					}
				}}},
		{name: "available, reserved for an owner that is gone, released uncleaned: erased before anyone else gets it, the record kept until then",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) {
				h.Status.State = infrav1.HostStateAvailable
				h.Status.ReservedFor = &infrav1.ObjectRef{APIGroup: clusterv1.GroupVersion.Group, Kind: "MachineDeployment", Namespace: "ns", Name: "gone"}
			}},
			bmc: fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateCleaning, check: func(t *testing.T, h *infrav1.RedfishHost) {
				if h.Status.ReservedFor != nil {
					t.Error("reservation kept")
				}
				if !strings.Contains(h.Annotations[infrav1.HostReservedForAnnotation], `"name":"gone"`) {
					t.Errorf("reservation record %q dropped before the erase ended: a status lost meanwhile would offer the host uncleaned", h.Annotations[infrav1.HostReservedForAnnotation])
				}
			}}},
		{name: "available, reserved for an owner that is gone, released cleaned: back in the pool",
			host: []func(*infrav1.RedfishHost){func(h *infrav1.RedfishHost) {
				h.Status.State = infrav1.HostStateAvailable
				h.Status.ReservedFor = &infrav1.ObjectRef{APIGroup: clusterv1.GroupVersion.Group, Kind: "MachineDeployment", Namespace: "ns", Name: "gone"}
				h.Status.Conditions = []metav1.Condition{{Type: infrav1.CleanedCondition, Status: metav1.ConditionTrue, Reason: "Erased"}}
			}},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateAvailable, requeue: check}},
		{name: "service boot asked of a running host: powered off first, nothing inserted yet",
			host: []func(*infrav1.RedfishHost){serviceBoot(infrav1.HostStateAvailable, "")},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"Reset(ForceOff)"}, requeue: firstLook}},
		{name: "service boot of a provisioned live host that is off: the claim's ISO and seed volume ejected, the image inserted, a Continuous override to the CD",
			host: []func(*infrav1.RedfishHost){serviceBoot(infrav1.HostStateProvisioned, "")},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"EjectMedia(/v1/ns/m1/)", "InsertMedia(diag.iso?sig=s3cret,)", "SetBootOverride(Cd,Continuous)"}, requeue: poll}},
		{name: "service boot of a host that is off: the seed server's media ejected, the image inserted, a Continuous override to the CD, recorded before the power-on",
			host: []func(*infrav1.RedfishHost){serviceBoot(infrav1.HostStateAvailable, "")},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"EjectMedia(http://seed.example)", "InsertMedia(diag.iso?sig=s3cret,)", "SetBootOverride(Cd,Continuous)"}, requeue: poll,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if sb := h.Status.ServiceBoot; sb == nil || sb.Image != "images.example/diag.iso" {
						t.Errorf("status.serviceBoot %+v, want the image's host and path recorded", sb)
					}
				}}},
		{name: "service boot recorded, host off (powered off by the BMC or the image): powered on into the image again",
			host: []func(*infrav1.RedfishHost){serviceBoot(infrav1.HostStateProvisioned, "images.example/diag.iso")},
			bmc:  fakeBMC{power: bmc.PowerOff},
			want: want{state: infrav1.HostStateProvisioned, calls: []string{"Reset(On)"}, requeue: firstLook}},
		{name: "service boot recorded, host on: nothing sent again",
			host: []func(*infrav1.RedfishHost){serviceBoot(infrav1.HostStateAvailable, "images.example/diag.iso")},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateAvailable, requeue: check}},
		{name: "service boot and a reboot request: the request wins, the host is powered off and nothing inserted",
			host: []func(*infrav1.RedfishHost){serviceBoot(infrav1.HostStateAvailable, ""), func(h *infrav1.RedfishHost) {
				h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "ops/psu", Mode: infrav1.RebootModeHard}}
			}},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"Reset(ForceOff)"}}},
		{name: "service boot passed to another requestor with the same image, the power held: the first one's boot ends (ejected) all the same",
			host: []func(*infrav1.RedfishHost){serviceBoot(infrav1.HostStateAvailable, "images.example/diag.iso"), func(h *infrav1.RedfishHost) {
				h.Spec.ServiceBoot.Requestor = "maintenance/other"
				h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "maintenance/diag", Mode: infrav1.RebootModeHard}}
			}},
			bmc: fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"EjectMedia(images.example/diag.iso)", "SetBootOverride(None)"}, requeue: poll,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.ServiceBoot != nil {
						t.Error("status.serviceBoot of the first requestor kept")
					}
				}}},
		{name: "service boot withdrawn: the image ejected, the override cleared, the record gone",
			host: []func(*infrav1.RedfishHost){serviceBoot(infrav1.HostStateAvailable, "images.example/diag.iso"), func(h *infrav1.RedfishHost) { h.Spec.ServiceBoot = nil }},
			bmc:  fakeBMC{power: bmc.PowerOn},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"EjectMedia(images.example/diag.iso)", "SetBootOverride(None)"}, requeue: poll,
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.ServiceBoot != nil {
						t.Error("status.serviceBoot kept")
					}
				}}},
		{name: "tasks done but a drive still erasing: not released",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true }), erasing("/t/1")},
			bmc:  fakeBMC{power: bmc.PowerOff, tasks: map[string]*bmc.Task{"/t/1": {State: "Completed", Done: true}}, inProgress: 1},
			want: want{state: infrav1.HostStateCleaning, calls: []string{"TaskStatus(/t/1)", "ErasesInProgress"}, condition: "Cleaned=False/Erasing", requeue: firstLook}},
		{name: "every erase done and verified: released",
			host: []func(*infrav1.RedfishHost){claimOf(infrav1.HostStateCleaning, func(c *infrav1.HostClaim) { c.Release = true }), erasing("/t/1")},
			bmc:  fakeBMC{power: bmc.PowerOff, tasks: map[string]*bmc.Task{"/t/1": {State: "Completed", Done: true}}},
			want: want{state: infrav1.HostStateAvailable, calls: []string{"TaskStatus(/t/1)", "ErasesInProgress"}, condition: "Cleaned=True/Erased",
				check: func(t *testing.T, h *infrav1.RedfishHost) {
					if h.Status.Claim != nil || h.Status.Erase != nil {
						t.Errorf("claim %v, erase %v", h.Status.Claim, h.Status.Erase)
					}
					if len(h.Annotations) != 0 {
						t.Errorf("records %v left on a released, cleaned host", h.Annotations)
					}
				}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &infrav1.RedfishHost{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", Finalizers: []string{Finalizer}},
				Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
			}
			for _, m := range tc.host {
				m(h)
			}
			if h.Status.State != "" && h.Status.State != infrav1.HostStateRegistering {
				h.Status.RegisteredAddress = h.Spec.BMC.Address
			}
			c := newFakeClient(t, h, tc.rm)
			f := tc.bmc
			r := &Reconciler{Client: c, APIReader: c, BMCs: fakeBMCs{bmc: &f, err: tc.getErr}, SeedBaseURL: "http://seed.example",
				PollInterval: poll, RetryInterval: retry, CheckInterval: check, OrphanGracePeriod: 2 * time.Minute, RestoreGracePeriod: 2 * time.Minute}
			if tc.sentOn {
				r.lastReset.Store(client.ObjectKeyFromObject(h), sentReset{t: bmc.ResetOn, at: time.Now()})
			}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
			res, err := r.Reconcile(context.Background(), req)
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			got := &infrav1.RedfishHost{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(h), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.State != tc.want.state {
				t.Errorf("state %q, want %q", got.Status.State, tc.want.state)
			}
			if !slices.Equal(f.calls, tc.want.calls) {
				t.Errorf("BMC calls %v, want %v", f.calls, tc.want.calls)
			}
			// The power state read is the round's reachability check, made once whatever states
			// the round goes through.
			if f.powerReads > 1 {
				t.Errorf("the power state read %d times in one round, want at most once", f.powerReads)
			}
			if tc.want.condition != "" {
				typ, rest, _ := strings.Cut(tc.want.condition, "=")
				cond := conditions.Get(got, typ)
				if cond == nil || fmt.Sprintf("%s/%s", cond.Status, cond.Reason) != rest {
					t.Errorf("condition %s = %v, want %s", typ, cond, rest)
				}
			}
			if tc.want.noRequeue && (res.RequeueAfter != 0 || res.Requeue) { //nolint:staticcheck // Requeue is what a handler might set
				t.Errorf("requeued (%+v), want to wait for a change", res)
			}
			// A look after a power action is timed from when it was sent, on the real clock: the
			// round's own milliseconds (more on a loaded machine) come off it.
			if tc.want.requeue != 0 && (res.RequeueAfter > tc.want.requeue || res.RequeueAfter < tc.want.requeue-50*time.Millisecond) {
				t.Errorf("requeue after %s, want %s (less the round's own time, up to 50ms)", res.RequeueAfter, tc.want.requeue)
			}
			if tc.want.check != nil {
				tc.want.check(t, got)
			}
			// A condition type the controller does not list as its own would send every round's
			// write through CAPI's patch helper, a read and up to three writes
			// (onepatch.Helper.Owning): whatever a round sets must be in the list.
			for _, c := range got.Status.Conditions {
				if !slices.Contains(ownedConditions, c.Type) {
					t.Errorf("the round set condition %s, not in ownedConditions %v", c.Type, ownedConditions)
				}
			}
		})
	}
}

// serviceBoot asks host h, in state, to run https://images.example/diag.iso; recorded, when not
// "", is what status.serviceBoot already says (a provisioned host gets the claim of m1).
func serviceBoot(state infrav1.HostState, recorded string) func(*infrav1.RedfishHost) {
	return func(h *infrav1.RedfishHost) {
		if state == infrav1.HostStateProvisioned {
			claimOf(state, func(c *infrav1.HostClaim) { c.Provisioned = true })(h)
		}
		h.Status.State = state
		h.Spec.ServiceBoot = &infrav1.ServiceBoot{Requestor: "maintenance/diag", Image: "https://images.example/diag.iso?sig=s3cret"}
		if recorded != "" {
			h.Status.ServiceBoot = &infrav1.ServiceBootStatus{Requestor: "maintenance/diag", Image: recorded, BootIssuedAt: metav1.Now()}
		}
	}
}

func noCondition(typ string) func(*testing.T, *infrav1.RedfishHost) {
	return func(t *testing.T, h *infrav1.RedfishHost) {
		if c := conditions.Get(h, typ); c != nil {
			t.Errorf("condition %s set: %v", typ, c)
		}
	}
}

// newFakeClient holds h, its credentials, the claim's RedfishMachine and seed Secret.
func newFakeClient(t *testing.T, h *infrav1.RedfishHost, mutateRM func(*infrav1.RedfishMachine)) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme, clusterv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	rm := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1", UID: "uid-m1"}}
	if mutateRM != nil {
		mutateRM(rm)
	}
	objs := []client.Object{h, rm,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds", Labels: map[string]string{infrav1.BMCCredentialsLabel: "true"}}, Data: map[string][]byte{"username": []byte("admin"), "password": []byte("pw")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: seed.SecretName("m1")}, Data: map[string][]byte{seed.KeyToken: []byte("tok")}},
		&clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers"}},
		&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1", UID: "uid-machine", Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}},
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&infrav1.RedfishHost{}).
		WithIndex(&infrav1.RedfishMachine{}, ProviderIDHostIndex, indexProviderIDHost).WithIndex(&infrav1.RedfishJob{}, JobHostIndex, IndexJobHost).
		WithIndex(&infrav1.RedfishJob{}, JobHostField, IndexJobHost).Build()
}

// A machine that claimed an Available host while the host controller was restoring another
// machine's claim on it keeps its claim: the restore is written with the resourceVersion read.
func TestClaimRestoreNeverOverwritesAClaimMadeMeanwhile(t *testing.T) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", Finalizers: []string{Finalizer}, Annotations: map[string]string{infrav1.HostClaimedByAnnotation: "m1"}},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
		Status:     infrav1.RedfishHostStatus{State: infrav1.HostStateInspecting, RegisteredAddress: "redfish://10.0.0.1/redfish/v1/Systems/1"},
	}
	c := newFakeClient(t, h, func(rm *infrav1.RedfishMachine) {
		rm.Spec.ProviderID = "redfish://ns/h1/m1"
		rm.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "m1", UID: "uid-machine"}}
	})
	r := &Reconciler{Client: c, APIReader: c, BMCs: fakeBMCs{bmc: &fakeBMC{power: bmc.PowerOff}}, PollInterval: time.Second, RetryInterval: time.Second,
		CheckInterval: time.Minute, OrphanGracePeriod: time.Minute, RestoreGracePeriod: time.Minute}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	// The host the reconcile reads is unclaimed; by the time it writes, m2 has claimed it.
	stale := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), req.NamespacedName, stale); err != nil {
		t.Fatal(err)
	}
	won := stale.DeepCopy()
	won.Status.Claim = &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Namespace: "ns", Name: "m2"}, ConsumerUID: "uid-m2"}
	if err := c.Status().Update(context.Background(), won); err != nil {
		t.Fatal(err)
	}
	r.APIReader = &staleReads{Client: c, host: stale} // the reconcile reads its host from the API server
	if _, err := r.Reconcile(context.Background(), req); err == nil {
		t.Error("restoring over a claim made meanwhile did not fail")
	}

	got := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Claim == nil || got.Status.Claim.Consumer.Name != "m2" {
		t.Errorf("claim %+v, want m2's", got.Status.Claim)
	}
}

// staleReads answers the first read of one host with an older copy, as a lagging cache does.
type staleReads struct {
	client.Client
	host *infrav1.RedfishHost
	done bool
}

func (s *staleReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if h, ok := obj.(*infrav1.RedfishHost); ok && key == client.ObjectKeyFromObject(s.host) && !s.done {
		s.done = true
		s.host.DeepCopyInto(h)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// A BMC that still reports the old power state right after accepting a reset (many do, for
// seconds) is not sent the same reset again within PollInterval: the host only reads the state.
// Another reset type, or the same one later, is sent.
func TestAResetIsNotRepeatedWhileTheBMCCatchesUp(t *testing.T) {
	f := &fakeBMC{power: bmc.PowerOff}
	r := &Reconciler{PollInterval: 200 * time.Millisecond}
	s := &scope{host: &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1"}}, bmc: f}
	ctx := context.Background()
	for range 3 {
		if err := r.reset(ctx, s, bmc.ResetOn); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.reset(ctx, s, bmc.ResetForceOff); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	if err := r.reset(ctx, s, bmc.ResetForceOff); err != nil {
		t.Fatal(err)
	}
	if want := []string{"Reset(On)", "Reset(ForceOff)", "Reset(ForceOff)"}; !slices.Equal(f.calls, want) {
		t.Errorf("BMC got %v, want %v", f.calls, want)
	}

	// A reset whose answer was lost (a timeout) may have been carried out: not sent again within
	// PollInterval either, while the BMC still reports the old state.
	lost := &fakeBMC{power: bmc.PowerOff, errs: map[string]error{"Reset": context.DeadlineExceeded}}
	s = &scope{host: &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h2"}}, bmc: lost}
	for range 2 {
		if err := r.reset(ctx, s, bmc.ResetOn); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	if want := []string{"Reset(On)"}; !slices.Equal(lost.calls, want) {
		t.Errorf("after a lost answer the BMC got %v, want %v", lost.calls, want)
	}
}

// A host held off by a reboot request whose requestor is gone is looked at again when the grace
// period ends (the request is dropped then), not at its next resync.
func TestAMissingRequestorsGraceEndWakesTheHost(t *testing.T) {
	r := &Reconciler{PollInterval: 2 * time.Second, OrphanGracePeriod: 2 * time.Minute}
	key := types.NamespacedName{Namespace: "ns", Name: "h1"}
	if _, ok := r.orphanDue(key); ok {
		t.Fatal("a host with no missing requestor has a due time")
	}
	r.missingRequestors.Store(key, map[string]time.Time{"remediation/a": time.Now().Add(-90 * time.Second), "remediation/b": time.Now()})
	due, ok := r.orphanDue(key)
	if !ok || due > 30*time.Second || due < 29*time.Second {
		t.Errorf("due in %s (%t), want about 30s", due, ok)
	}
	r.missingRequestors.Store(key, map[string]time.Time{"remediation/a": time.Now().Add(-time.Hour)})
	if due, _ := r.orphanDue(key); due != r.firstLook() {
		t.Errorf("a grace period over: due in %s, want %s", due, r.firstLook())
	}
}

// While a RedfishJob runs on a host, the host's own BMC actions wait: a claimed host does not
// start provisioning (no power-off, no boot) until the job has finished.
func TestAHostWaitsForARunningJob(t *testing.T) {
	released := claimOf(infrav1.HostStateProvisioned, func(c *infrav1.HostClaim) { c.Release = true })
	off := func(h *infrav1.RedfishHost) { h.Status.State, h.Spec.Online = infrav1.HostStateAvailable, new(bool) }
	const forM1 = " for RedfishMachine m1"
	for _, tc := range []struct {
		name        string
		host        func(*infrav1.RedfishHost)
		cacheBehind bool   // the job is on the API server, not yet in the manager's cache
		noSelector  bool   // the API server refuses field selectors on custom resources
		waits       string // what the host's event says waits for the job
	}{
		{"provisioning", claimOf(infrav1.HostStateProvisioning), false, false, "provisioning" + forM1},
		// Claimed while Available too: provisioning starts in the round that sees the claim.
		{"claimed while Available", claimOf(infrav1.HostStateAvailable), false, false, "provisioning" + forM1},
		{"released", released, false, false, "release" + forM1},
		{"unclaimed, to be powered off (spec.online false)", off, false, false, "power-off"},
		// A round that sees a claim made or released reads the jobs from the API server: a job
		// started just before the claim or the release (it confirmed its start against the host
		// without them) may not be in the cache yet; here the cache never catches up.
		{"claimed while Available, the job not yet in the cache", claimOf(infrav1.HostStateAvailable), true, false, "provisioning" + forM1},
		{"claimed and released while Available, the job not yet in the cache",
			claimOf(infrav1.HostStateAvailable, func(c *infrav1.HostClaim) { c.Release = true }), true, false, "release" + forM1},
		{"a provisioned claim written back and released while Available, the job not yet in the cache",
			claimOf(infrav1.HostStateAvailable, func(c *infrav1.HostClaim) { c.Provisioned, c.Release = true, true }), true, false, "release" + forM1},
		{"released, the job not yet in the cache", released, true, false, "release" + forM1},
		{"released, the job not yet in the cache, an API server without field selectors", released, true, true, "release" + forM1},
	} {
		t.Run(tc.name, func(t *testing.T) { hostWaitsForARunningJob(t, tc.host, tc.cacheBehind, tc.noSelector, tc.waits) })
	}
}

// jobsAhead reads RedfishJobs from jobs, the rest from Reader: an API server whose jobs the cache
// has not seen yet. With noSelector, it refuses a list by field selector as an API server older
// than Kubernetes v1.31 does.
type jobsAhead struct {
	client.Reader
	jobs       client.Reader
	noSelector bool
}

func (a jobsAhead) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*infrav1.RedfishJobList); ok {
		if o := (&client.ListOptions{}).ApplyOptions(opts); a.noSelector && o.FieldSelector != nil && !o.FieldSelector.Empty() {
			return apierrors.NewBadRequest("field label not supported: spec.hostName")
		}
		return a.jobs.List(ctx, list, opts...)
	}
	return a.Reader.List(ctx, list, opts...)
}

func hostWaitsForARunningJob(t *testing.T, claimed func(*infrav1.RedfishHost), cacheBehind, noSelector bool, waits string) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", Finalizers: []string{Finalizer}},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	claimed(h)
	h.Status.RegisteredAddress = h.Spec.BMC.Address
	state := h.Status.State
	c := newFakeClient(t, h, nil)
	var api client.Reader = c
	jobs := c
	if cacheBehind {
		jobs = fake.NewClientBuilder().WithScheme(c.Scheme()).
			WithIndex(&infrav1.RedfishJob{}, JobHostIndex, IndexJobHost).WithIndex(&infrav1.RedfishJob{}, JobHostField, IndexJobHost).Build()
		api = jobsAhead{Reader: c, jobs: jobs, noSelector: noSelector}
	}
	// Another host's job runs throughout: it holds nothing here.
	other := metav1.NowMicro()
	if err := jobs.Create(context.Background(), &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other"},
		Spec: infrav1.RedfishJobSpec{HostName: "h2"}, Status: infrav1.RedfishJobStatus{StartTime: &other}}); err != nil {
		t.Fatal(err)
	}
	started := metav1.NowMicro()
	j := &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cycle"}, Spec: infrav1.RedfishJobSpec{HostName: "h1"},
		Status: infrav1.RedfishJobStatus{StartTime: &started}}
	if err := jobs.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	f := fakeBMC{power: bmc.PowerOn}
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: c, APIReader: api, BMCs: fakeBMCs{bmc: &f}, SeedBaseURL: "http://seed.example", Recorder: rec,
		PollInterval: time.Second, RetryInterval: time.Second, CheckInterval: time.Minute, OrphanGracePeriod: 2 * time.Minute, RestoreGracePeriod: 2 * time.Minute}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	// The first reconcile of a host records that it is not paused (and goes on).
	for i := range 3 {
		res, err := r.Reconcile(context.Background(), req)
		if err != nil || len(f.calls) > 0 {
			t.Fatalf("round %d, with a job running: %v, BMC calls %v", i, err, f.calls)
		}
		if res.RequeueAfter != time.Minute {
			t.Errorf("round %d: requeue %s, want the check interval (the job's end wakes the host)", i, res.RequeueAfter)
		}
	}
	waiting := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(h), waiting); err != nil {
		t.Fatal(err)
	}
	if waiting.Status.State != state {
		t.Errorf("state %s while the job runs, want %s (the host acts on its claim once the job ends)", waiting.Status.State, state)
	}
	// What the host waits for is in its events, its status unchanged.
	var said []string
	for len(rec.Events) > 0 {
		said = append(said, <-rec.Events)
	}
	want := "Normal " + WaitingForJobReason + " RedfishJob cycle runs on this host: its " + waits + " waits for the job's end"
	var held int
	for _, e := range said {
		switch {
		case e == want:
			held++
		case strings.Contains(e, WaitingForJobReason):
			t.Errorf("event %q, want %q", e, want)
		}
	}
	if held == 0 || held > 3 {
		t.Errorf("%d events name the job in 3 rounds, want one a round: %q", held, said)
	}
	now := metav1.NowMicro()
	j.Status.CompletionTime = &now
	if err := jobs.Update(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	// The host goes on (claimed and released at once, it writes Deprovisioning first).
	for range 2 {
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.calls) == 0 {
		t.Fatal("after the job: no BMC calls; want the host to go on")
	}
}

// A job that goes back to waiting without finishing (its start confirmed against a release made
// meanwhile) wakes its host at once, as one that finishes does: the host waits for no running job.
func TestAJobThatStopsRunningWakesItsHost(t *testing.T) {
	started := metav1.NowMicro()
	waiting := infrav1.RedfishJob{}
	running := infrav1.RedfishJob{Status: infrav1.RedfishJobStatus{StartTime: &started}}
	finished := *running.DeepCopy()
	finished.Status.CompletionTime = &started
	for _, c := range []struct {
		name          string
		before, after infrav1.RedfishJob
		want          bool
	}{
		{"started", waiting, running, false},
		{"finished", running, finished, true},
		{"back to waiting", running, waiting, true},
		{"still running", running, running, false},
	} {
		if got := jobChanges.Update(event.UpdateEvent{ObjectOld: &c.before, ObjectNew: &c.after}); got != c.want {
			t.Errorf("%s: wakes the host %t, want %t", c.name, got, c.want)
		}
	}
}

// A power transition is read at fixed points after the action (firstLook, 2 and 3 firstLooks,
// then each half as long again after the action as the one before, gaps at most
// maxTransitionBackoff), whatever other rounds run in between: a round its own status write
// triggers early (the queue then drops the pending look) must not push the next look further
// out, and the same reset sent again (a BMC slow to leave PoweringOff) must not start the
// schedule over.
func TestATransitionIsReadOnScheduleWhateverRoundsRunInBetween(t *testing.T) {
	// Whatever its length D, a transition is seen done at most half D late (at most firstLook
	// for a short one, and at most maxTransitionBackoff), in few reads: a doubling schedule saw
	// a 4-s power-off at 7.5 s.
	const first = 500 * time.Millisecond
	for d := time.Millisecond; d <= 10*time.Minute; d += d/8 + time.Millisecond {
		at, reads := time.Duration(0), 0
		for at < d {
			at += lookAfter(at, first)
			reads++
		}
		if late := at - d; late > max(d/2, first) || late > maxTransitionBackoff {
			t.Errorf("a %s transition seen at %s (%s late)", d, at, late)
		}
		if d <= 20*time.Second && reads > 10 {
			t.Errorf("a %s transition read %d times", d, reads)
		}
	}

	start := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	now := start
	r := &Reconciler{PollInterval: 2 * time.Second, clock: func() time.Time { return now }}
	h := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h", UID: "u1"}}
	key := types.NamespacedName{Namespace: "ns", Name: "h"}
	fake := &fakeBMC{}
	// One round: the handler sends reset (if any) and asks for its resync (a minute); the look
	// at the transition comes sooner.
	round := func(at time.Duration, reset bmc.ResetType, power bmc.PowerState) time.Duration {
		now = start.Add(at)
		s := &scope{host: h, bmc: fake, power: power}
		if reset != "" {
			if err := r.reset(context.Background(), s, reset); err != nil {
				t.Fatal(err)
			}
		}
		return r.followTransition(key, s, ctrl.Result{RequeueAfter: time.Minute}).RequeueAfter
	}
	for _, c := range []struct {
		at     time.Duration
		reset  bmc.ResetType
		power  bmc.PowerState
		wantAt time.Duration // when the next look is due, from start
	}{
		{0, bmc.ResetForceOff, bmc.PowerOn, 500 * time.Millisecond},
		{500 * time.Millisecond, bmc.ResetForceOff, bmc.PowerPoweringOff, time.Second}, // the repeat is not sent (guard)
		// The round the status write (PoweringOff) triggered at once: same next look.
		{550 * time.Millisecond, bmc.ResetForceOff, bmc.PowerPoweringOff, time.Second},
		{time.Second, "", bmc.PowerPoweringOff, 1500 * time.Millisecond},
		{1500 * time.Millisecond, "", bmc.PowerPoweringOff, 2250 * time.Millisecond},
		// Sent again (past the guard): the schedule goes on.
		{2250 * time.Millisecond, bmc.ResetForceOff, bmc.PowerPoweringOff, 3375 * time.Millisecond},
		{3375 * time.Millisecond, "", bmc.PowerPoweringOff, 5062 * time.Millisecond},
		{5062 * time.Millisecond, "", bmc.PowerPoweringOff, 7593 * time.Millisecond},
		{57654 * time.Millisecond, "", bmc.PowerPoweringOff, 86481 * time.Millisecond},
		// Past the growth: every maxTransitionBackoff.
		{86481 * time.Millisecond, "", bmc.PowerPoweringOff, 116481 * time.Millisecond},
		{116481 * time.Millisecond, "", bmc.PowerPoweringOff, 146481 * time.Millisecond},
	} {
		if got := round(c.at, c.reset, c.power); c.at+got != c.wantAt {
			t.Errorf("round at %s: next look at %s, want %s", c.at, c.at+got, c.wantAt)
		}
	}
	if n := strings.Count(strings.Join(fake.calls, " "), "Reset(ForceOff)"); n != 2 {
		t.Errorf("%d ForceOffs sent, want 2 (the first, and the one past the guard): %v", n, fake.calls)
	}
	// A transition followed for hours is still read every maxTransitionBackoff, never sooner than
	// a second.
	for _, at := range []time.Duration{90 * time.Second, 2 * time.Hour, 2*time.Hour + 17*time.Second} {
		now = start.Add(at)
		r.transitions.Store(key, followed{uid: h.UID, reset: bmc.ResetForceOff, start: start, last: now})
		if got := r.followTransition(key, &scope{host: h, bmc: fake, power: bmc.PowerPoweringOff}, ctrl.Result{RequeueAfter: time.Hour}).RequeueAfter; got < time.Second || got > maxTransitionBackoff {
			t.Errorf("after %s: next look in %s, want between 1s and %s", at, got, maxTransitionBackoff)
		}
	}
	// Settled: the schedule is forgotten, and the next action starts a new one.
	if got := round(3*time.Hour, "", bmc.PowerOff); got != time.Minute {
		t.Errorf("settled: requeue %s, want the handler's minute", got)
	}
	if got := round(3*time.Hour+time.Second, bmc.ResetOn, bmc.PowerOff); got != 500*time.Millisecond {
		t.Errorf("a new action: first look after %s, want 500ms", got)
	}
	// Another host of the same name does not inherit the schedule.
	h.UID = "u2"
	if got := round(3*time.Hour+3*time.Second, "", bmc.PowerPoweringOn); got != 500*time.Millisecond {
		t.Errorf("a recreated host: first look after %s, want 500ms", got)
	}
}

// writeLog records the writes a reconcile makes.
type writeLog struct {
	client.Client
	writes    []string
	statusErr error // when set, status writes fail with it
}

func (w *writeLog) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	w.writes = append(w.writes, "patch")
	return w.Client.Patch(ctx, o, p, opts...)
}

func (w *writeLog) Status() client.SubResourceWriter { return &statusLog{w.Client.Status(), w} }

type statusLog struct {
	client.SubResourceWriter
	w *writeLog
}

func (s *statusLog) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	s.w.writes = append(s.w.writes, "status patch")
	if s.w.statusErr != nil {
		return s.w.statusErr
	}
	return s.SubResourceWriter.Patch(ctx, o, p, opts...)
}

func (s *statusLog) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	s.w.writes = append(s.w.writes, "status update")
	return s.SubResourceWriter.Update(ctx, o, opts...)
}

// A host whose inspection fails in the round that registers it tells the registration alone,
// and the inspection when a later round makes it.
func TestARegistrationWhoseInspectionFailsIsToldAlone(t *testing.T) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1"},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	c := newFakeClient(t, h, nil)
	f := &fakeBMC{power: bmc.PowerOff, errs: map[string]error{"Inventory": errors.New("Storage: 500 Internal Server Error")}}
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, APIReader: c, BMCs: fakeBMCs{bmc: f}, SeedBaseURL: "http://seed.example", Recorder: rec,
		PollInterval: 2 * time.Second, RetryInterval: 30 * time.Second, CheckInterval: time.Minute, OrphanGracePeriod: 2 * time.Minute, RestoreGracePeriod: 2 * time.Minute}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	said := func() []string {
		var out []string
		for len(rec.Events) > 0 {
			out = append(out, <-rec.Events)
		}
		return out
	}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := said(); len(got) != 1 || got[0] != "Normal Registered BMC redfish://10.0.0.1/redfish/v1/Systems/1 answered with the given credentials" {
		t.Errorf("events of the round whose inspection failed: %q, want the registration alone", got)
	}
	delete(f.errs, "Inventory")
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := said(); len(got) != 1 || !strings.HasPrefix(got[0], "Normal Inspected Sim") {
		t.Errorf("events of the round that inspected: %q, want the inspection", got)
	}
}

// A new host is registered and inspected in the round that stores its finalizer: at N = 1000
// hosts registering at once the manager was bound by its client rate limit, and each round cost
// its own status patches. Two writes (the finalizer, the status with its conditions), where seven
// were made over four rounds, and three while CAPI's patch helper wrote the conditions apart.
func TestANewHostIsRegisteredAndInspectedInTheRoundThatStoresItsFinalizer(t *testing.T) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1"},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	c := &writeLog{Client: newFakeClient(t, h, nil)}
	f := &fakeBMC{power: bmc.PowerOff}
	// A host deleted in the round that registers it must still go through its finalizer (which
	// drops its BMC session): the finalizer is stored before the BMC is contacted.
	connecting := func() {
		stored := &infrav1.RedfishHost{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), stored); err != nil || !slices.Contains(stored.Finalizers, Finalizer) {
			t.Errorf("the BMC was contacted before the finalizer was stored (%v, finalizers %v)", err, stored.Finalizers)
		}
	}
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, APIReader: c, BMCs: fakeBMCs{bmc: f, connecting: connecting}, SeedBaseURL: "http://seed.example", Recorder: rec,
		PollInterval: 2 * time.Second, RetryInterval: 30 * time.Second, CheckInterval: time.Minute, OrphanGracePeriod: 2 * time.Minute, RestoreGracePeriod: 2 * time.Minute}
	got := &infrav1.RedfishHost{}
	rounds := 0
	for ; rounds < 6 && got.Status.State != infrav1.HostStateAvailable; rounds++ {
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}); err != nil {
			t.Fatalf("round %d: %v", rounds+1, err)
		}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), got); err != nil {
			t.Fatal(err)
		}
	}
	if got.Status.State != infrav1.HostStateAvailable || !slices.Contains(got.Finalizers, Finalizer) || got.Status.Inventory == nil {
		t.Fatalf("after %d rounds: state %q, finalizers %v, inventory %v; want Available, finalized, inspected", rounds, got.Status.State, got.Finalizers, got.Status.Inventory)
	}
	// One round: the finalizer, then the status with its conditions in one write (the Paused
	// condition among them: CAPI's EnsurePausedCondition would have written it alone and asked for
	// another round; CAPI's patch helper writes the conditions apart from the rest of the status).
	if rounds != 1 || !slices.Equal(c.writes, []string{"patch", "status patch"}) {
		t.Errorf("Available after %d rounds and writes %v; want 1 round and 2 writes (the finalizer, the status)", rounds, c.writes)
	}
	if p := conditions.Get(got, infrav1.PausedCondition); p == nil || p.Status != metav1.ConditionFalse {
		t.Errorf("Paused condition %v, want False", p)
	}
	if !slices.Equal(f.calls, []string{"Inventory"}) {
		t.Errorf("BMC calls %v, want only the inventory read", f.calls)
	}
	// One event tells both (each event is a write too: two per host were a fifth of a fleet's
	// registration writes).
	var said []string
	for len(rec.Events) > 0 {
		said = append(said, <-rec.Events)
	}
	if len(said) != 1 || !strings.HasPrefix(said[0], "Normal Registered BMC redfish://10.0.0.1/redfish/v1/Systems/1 answered with the given credentials; inspected: ") {
		t.Errorf("events %q, want one that tells the registration and the inspection", said)
	}
	before := len(c.writes)
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}); err != nil {
		t.Fatal(err)
	}
	if w := c.writes[before:]; len(w) != 0 {
		t.Errorf("the round its own write wakes wrote %v, want nothing", w)
	}
}

// The power-on of a claim follows in the round that prepares the boot, once the boot is stored
// (status.bootIssuedAt: a server is never booted twice for a claim, whatever happens to the
// power-on's answer); a round after its own write cost every replacement in a rolling update.
func TestTheProvisioningPowerOnIsSentOnceTheBootIsStoredInTheSameRound(t *testing.T) {
	h := claimedHost(infrav1.HostStateAvailable)
	c := newFakeClient(t, h, nil)
	f := &fakeBMC{power: bmc.PowerOff}
	f.resetting = func() {
		stored := &infrav1.RedfishHost{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), stored); err != nil || stored.Status.BootIssuedAt == nil || stored.Status.State != infrav1.HostStateProvisioning {
			t.Errorf("power-on sent before the boot was stored (%v; stored: state %q, bootIssuedAt %v)", err, stored.Status.State, stored.Status.BootIssuedAt)
		}
	}
	r := reconcilerFor(c, f)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	reads := f.powerReads
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if want := []string{"InsertMedia(image,cidata.iso)", "SetBootOverride(Cd)", "Reset(On)"}; !slices.Equal(f.calls, want) {
		t.Fatalf("BMC calls %v, want %v in one round", f.calls, want)
	}
	// The power-on starts from the state the round read: a BMC whose reads take a second is not
	// read twice on the way to the boot.
	if n := f.powerReads - reads; n != 1 {
		t.Errorf("the boot's round read the power state %d times, want 1", n)
	}
	// The server is now powering on; the next rounds only read it.
	f.power = bmc.PowerOn
	for range 2 {
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.calls); n != 3 {
		t.Errorf("BMC calls %v after the power-on, want none", f.calls[3:])
	}
}

// A change that lands while the boot is being prepared (BMC calls take seconds) comes before the
// power-on: the machine deleted (its claim released), a reboot request holding the power off.
func TestAChangeWhileTheBootIsPreparedComesBeforeThePowerOn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		live   bool // the boot of a provisioned live image, prepared again before a power-on
		change func(h *infrav1.RedfishHost)
	}{
		{"claim released", false, func(h *infrav1.RedfishHost) { h.Status.Claim.Release = true }},
		{"reboot request", false, func(h *infrav1.RedfishHost) {
			h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "maintenance/bios"}}
		}},
		{"live image, claim released", true, func(h *infrav1.RedfishHost) { h.Status.Claim.Release = true }},
		{"live image, reboot request", true, func(h *infrav1.RedfishHost) {
			h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "remediation/m1"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := claimedHost(infrav1.HostStateProvisioning)
			if tc.live {
				h = claimedHost(infrav1.HostStateProvisioned)
				h.Status.Claim.Provisioned = true
				h.Status.LiveBootIssuedAt = &metav1.Time{Time: time.Now()} // recorded: this round prepares and powers on
			}
			c := newFakeClient(t, h, nil)
			f := &fakeBMC{power: bmc.PowerOff}
			f.preparing = func() {
				other := &infrav1.RedfishHost{}
				if err := c.Get(t.Context(), client.ObjectKeyFromObject(h), other); err != nil {
					t.Fatal(err)
				}
				tc.change(other)
				if err := c.Update(t.Context(), other); err != nil { // the spec (the answer resets the status)
					t.Fatal(err)
				}
				tc.change(other)
				if err := c.Status().Update(t.Context(), other); err != nil {
					t.Fatal(err)
				}
			}
			r := reconcilerFor(c, f)
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
			if _, err := r.Reconcile(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(f.calls, "Reset(On)") {
				t.Errorf("BMC calls %v: powered on after the change", f.calls)
			}
		})
	}
}

// A boot that could not be stored is not sent: a power-on without status.bootIssuedAt could be
// followed by a second boot of the same claim; one without status.liveBootIssuedAt would find the
// seed server's window closed.
func TestNoPowerOnWhenTheBootCouldNotBeStored(t *testing.T) {
	for _, live := range []bool{false, true} {
		h := claimedHost(infrav1.HostStateProvisioning)
		if live {
			h = claimedHost(infrav1.HostStateProvisioned)
			h.Status.Claim.Provisioned = true
		}
		c := &writeLog{Client: newFakeClient(t, h, nil)}
		f := &fakeBMC{power: bmc.PowerOff}
		r := reconcilerFor(c, f)
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
		c.statusErr = errors.New("etcd is unavailable")
		if _, err := r.Reconcile(t.Context(), req); err == nil {
			t.Errorf("live %v: the round reported no error", live)
		}
		if slices.Contains(f.calls, "Reset(On)") {
			t.Errorf("live %v: BMC calls %v: powered on with the boot not stored", live, f.calls)
		}
	}
}

// A live boot gets a new token before anything names its seed: one read earlier (from the BMC's
// media settings, a PXE node's command line) fetches nothing any more; the media then name the new one.
func TestALiveBootRenewsTheSeedsTokenBeforeItsMediaNameIt(t *testing.T) {
	h := claimedHost(infrav1.HostStateProvisioned)
	h.Status.Claim.Provisioned = true
	c := newFakeClient(t, h, nil)
	f := &fakeBMC{power: bmc.PowerOff}
	r := reconcilerFor(c, f)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	for range 2 {
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	sec := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: seed.SecretName("m1")}, sec); err != nil {
		t.Fatal(err)
	}
	token := string(sec.Data[seed.KeyToken])
	if token == "tok" || len(token) != 64 {
		t.Fatalf("the seed's token %q was not renewed", token)
	}
	if !slices.Equal(f.calls, []string{"InsertMedia(image,cidata.iso)", "SetBootOverride(Cd)", "Reset(On)"}) {
		t.Errorf("BMC calls %v", f.calls)
	}
	if len(f.inserted) == 0 || !strings.Contains(f.inserted[0], "/"+token+"/") {
		t.Errorf("media inserted %v, want URLs with the renewed token", f.inserted)
	}
}

// A live node whose seed is gone is powered on only when its machine stays: provisioned by an
// earlier release (which deleted the seed at the join), as then; a machine being deleted removes
// its seed before it releases the host, and that host is not powered on meanwhile.
func TestALiveNodeWithoutItsSeedIsPoweredOnOnlyWhenItsMachineStays(t *testing.T) {
	for _, deleting := range []bool{false, true} {
		h := claimedHost(infrav1.HostStateProvisioned)
		h.Status.Claim.Provisioned = true
		c := newFakeClient(t, h, func(rm *infrav1.RedfishMachine) {
			rm.Finalizers = []string{"redfishmachine.infrastructure.cluster.x-k8s.io"}
		})
		if err := c.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: seed.SecretName("m1")}}); err != nil {
			t.Fatal(err)
		}
		if deleting {
			if err := c.Delete(t.Context(), &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1"}}); err != nil {
				t.Fatal(err)
			}
		}
		f := &fakeBMC{power: bmc.PowerOff}
		if _, err := reconcilerFor(c, f).Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}); err != nil {
			t.Fatal(err)
		}
		want := []string{"Reset(On)"}
		if deleting {
			want = nil
		}
		if !slices.Equal(f.calls, want) {
			t.Errorf("machine deleting %v: BMC calls %v, want %v", deleting, f.calls, want)
		}
	}
}

// claimedHost is a registered host with the finalizer, claimed by m1, in state.
func claimedHost(state infrav1.HostState) *infrav1.RedfishHost {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", Finalizers: []string{Finalizer}},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	claimOf(state)(h)
	h.Status.RegisteredAddress = h.Spec.BMC.Address
	return h
}

// reconcilerFor is the host controller on client c and BMC f, at the default intervals.
func reconcilerFor(c client.Client, f *fakeBMC) *Reconciler {
	return &Reconciler{Client: c, APIReader: c, BMCs: fakeBMCs{bmc: f}, SeedBaseURL: "http://seed.example",
		PollInterval: 2 * time.Second, RetryInterval: 30 * time.Second, CheckInterval: time.Minute, OrphanGracePeriod: 2 * time.Minute, RestoreGracePeriod: 2 * time.Minute}
}

// A host removed by force (its finalizer dropped, so its deletion never ran) gives its BMC
// session back once the controller finds it gone; a host created again under its name, for
// another BMC, drops the old host's connection when it connects.
func TestAHostGoneWithoutItsFinalizerGivesItsBMCSessionBack(t *testing.T) {
	const addr = "redfish://10.0.0.1/redfish/v1/Systems/1"
	newHost := func(uid types.UID, address string) *infrav1.RedfishHost {
		return &infrav1.RedfishHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", UID: uid},
			Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: address, CredentialsName: "creds"}},
		}
	}
	h := newHost("uid-1", addr)
	c := newFakeClient(t, h, nil)
	var forgot []string
	r := reconcilerFor(c, &fakeBMC{power: bmc.PowerOff})
	r.BMCs = fakeBMCs{bmc: &fakeBMC{power: bmc.PowerOff}, forgot: &forgot}
	key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	for range 2 {
		if _, err := r.Reconcile(t.Context(), key); err != nil {
			t.Fatal(err)
		}
	}
	if len(forgot) != 0 {
		t.Fatalf("forgot %v while the host is registered", forgot)
	}
	stored := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), key.NamespacedName, stored); err != nil {
		t.Fatal(err)
	}
	stored.Finalizers = nil
	if err := c.Update(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if want := []string{addr + " uid-1"}; !slices.Equal(forgot, want) {
		t.Fatalf("forgot %v after the host vanished, want %v", forgot, want)
	}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if len(forgot) != 1 {
		t.Errorf("forgot again on a later round: %v", forgot)
	}

	// Created again under the name, for another BMC, before the controller saw the old one gone.
	forgot = nil
	r.connected.Store(key.NamespacedName, connectedTo{address: addr, uid: "uid-1"})
	const other = "redfish://10.0.0.2/redfish/v1/Systems/1"
	if err := c.Create(t.Context(), newHost("uid-2", other)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if want := []string{addr + " uid-1"}; !slices.Equal(forgot, want) {
		t.Errorf("forgot %v when the new host connected, want %v", forgot, want)
	}
}

// Deleting a host and changing its address drop only that host's own client (its UID).
func TestDeletionAndANewAddressForgetOnlyTheHostsOwnClient(t *testing.T) {
	const addr, other = "redfish://10.0.0.1/redfish/v1/Systems/1", "redfish://10.0.0.2/redfish/v1/Systems/1"
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", UID: "uid-1"},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: addr, CredentialsName: "creds"}},
	}
	c := newFakeClient(t, h, nil)
	var forgot []string
	r := reconcilerFor(c, &fakeBMC{power: bmc.PowerOff})
	r.BMCs = fakeBMCs{bmc: &fakeBMC{power: bmc.PowerOff}, forgot: &forgot}
	key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), key); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	reconcile()
	stored := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), key.NamespacedName, stored); err != nil || stored.Status.State != infrav1.HostStateAvailable {
		t.Fatalf("host %v %v, want Available", stored.Status.State, err)
	}
	stored.Spec.BMC.Address = other
	if err := c.Update(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if !slices.Contains(forgot, addr+" uid-1") {
		t.Errorf("forgot %v after the address changed, want %q", forgot, addr+" uid-1")
	}
	forgot = nil
	if err := c.Get(t.Context(), key.NamespacedName, stored); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if !slices.Contains(forgot, other+" uid-1") || slices.ContainsFunc(forgot, func(f string) bool { return !strings.HasSuffix(f, " uid-1") }) {
		t.Errorf("forgot %v on deletion, want %q and only the host's own", forgot, other+" uid-1")
	}
}

// laggingCache reads from the cache and writes to the API server, as a manager's client does.
type laggingCache struct {
	client.Client // the API server
	cache         *client.Client
}

func (l laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return (*l.cache).Get(ctx, key, obj, opts...)
}

// A round that finds the cache behind the controller's own last write of the host does nothing
// (no BMC call, no API read: the copy would repeat what that write recorded) and comes back; once
// the cache has the write, the round acts on it.
func TestARoundOnACacheBehindItsOwnLastWriteWaitsForIt(t *testing.T) {
	h := claimedHost(infrav1.HostStateProvisioning)
	api := newFakeClient(t, h, nil)
	var cache client.Client
	sync := func() { // the cache: the API server's copy, resourceVersion included
		cur := &infrav1.RedfishHost{}
		if err := api.Get(t.Context(), client.ObjectKeyFromObject(h), cur); err != nil {
			t.Fatal(err)
		}
		cache = fake.NewClientBuilder().WithScheme(api.Scheme()).WithObjects(cur).Build()
	}
	sync()
	f := &fakeBMC{power: bmc.PowerOff}
	r := reconcilerFor(nil, f)
	r.fresh = &fresh.Reads{Kind: infrav1.GroupVersion.WithKind("RedfishHost")}
	reads := &apireads.Counter{Reader: api}
	r.Client, r.APIReader = r.fresh.Client(laggingCache{Client: api, cache: &cache}), reads
	// The controller's last write (the boot recorded), which the cache has not seen.
	written := &infrav1.RedfishHost{}
	if err := api.Get(t.Context(), client.ObjectKeyFromObject(h), written); err != nil {
		t.Fatal(err)
	}
	written.Status.BootIssuedAt = ptr.To(metav1.Now())
	if err := r.Client.Status().Update(t.Context(), written); err != nil {
		t.Fatal(err)
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	res, err := r.Reconcile(t.Context(), req)
	if err != nil || res.RequeueAfter != r.PollInterval || len(f.calls) != 0 || reads.Gets != 0 {
		t.Fatalf("round on a cache behind: %v, %+v, BMC calls %v, %d API reads; want nothing done, back in PollInterval", err, res, f.calls, reads.Gets)
	}
	// The cache catches up: the round acts on the written copy (the boot issued: no second boot).
	sync()
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(f.calls, "Reset(On)") || reads.Gets != 0 {
		t.Errorf("round on the caught-up cache: BMC calls %v, %d API reads; want no second power-on, no API read", f.calls, reads.Gets)
	}
}

// A Soft reboot request presses the power button once: an OS that takes 20 s to shut down is not
// pressed again every look (a second press can turn a server back on), and only once the
// documented timeout passed with the server still on is it forced off, once.
func TestASoftPowerOffIsPressedOnceThenForcedAfterTheTimeout(t *testing.T) {
	h := claimedHost(infrav1.HostStateProvisioned)
	h.Status.Claim.Provisioned = true
	h.Status.PowerState = "On"
	h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "remediation/x", Mode: infrav1.RebootModeSoft}}
	c := newFakeClient(t, h, nil)
	f := &fakeBMC{power: bmc.PowerOn}
	r := reconcilerFor(c, f)
	r.SoftPowerOffTimeout = 5 * time.Minute
	now := time.Now()
	r.clock = func() time.Time { return now }
	key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	presses := func(t bmc.ResetType) int {
		n := 0
		for _, call := range f.calls {
			if call == "Reset("+string(t)+")" {
				n++
			}
		}
		return n
	}
	// The OS shuts down for 4 minutes: looks every 2.5 s press nothing more.
	for i := 0; i < 96; i++ {
		if _, err := r.Reconcile(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		now = now.Add(2500 * time.Millisecond)
	}
	if n := presses(bmc.ResetGracefulShutdown); n != 1 {
		t.Fatalf("GracefulShutdown pressed %d times in 4 minutes, want once (calls %v)", n, f.calls)
	}
	if n := presses(bmc.ResetForceOff); n != 0 {
		t.Fatalf("forced off before the timeout")
	}
	got := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), key.NamespacedName, got); err != nil || got.Status.SoftPowerOffSentAt == nil {
		t.Fatalf("status.softPowerOffSentAt %v (%v): the press must be recorded", got.Status.SoftPowerOffSentAt, err)
	}
	// Past the timeout, still on: forced off once.
	now = now.Add(time.Minute + time.Second)
	for range 2 {
		if _, err := r.Reconcile(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		now = now.Add(500 * time.Millisecond)
	}
	if n := presses(bmc.ResetForceOff); n != 1 {
		t.Errorf("ForceOff sent %d times after the timeout, want once (calls %v)", n, f.calls)
	}
	if n := presses(bmc.ResetGracefulShutdown); n != 1 {
		t.Errorf("GracefulShutdown pressed %d times, want once", n)
	}
	// Off: the record goes, and a later Soft request presses again.
	f.power = bmc.PowerOff
	now = now.Add(5 * time.Second)
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), key.NamespacedName, got); err != nil || got.Status.SoftPowerOffSentAt != nil {
		t.Errorf("status.softPowerOffSentAt %v once off (%v), want it cleared", got.Status.SoftPowerOffSentAt, err)
	}
}

// A GracefulShutdown the BMC refused was not carried out: the next round presses it again (a
// press recorded but never made would leave the server on until the timeout forced it off); a
// BMC without GracefulShutdown is forced off at once, with an event; and a press whose record
// could not be written is neither made nor recorded.
func TestARefusedSoftPowerOffIsPressedAgainOrForced(t *testing.T) {
	setup := func(t *testing.T) (*fakeBMC, *Reconciler, client.Client, ctrl.Request, *time.Time, *events.FakeRecorder) {
		h := claimedHost(infrav1.HostStateProvisioned)
		h.Status.Claim.Provisioned = true
		h.Status.PowerState = "On"
		h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "remediation/x", Mode: infrav1.RebootModeSoft}}
		c := newFakeClient(t, h, nil)
		f := &fakeBMC{power: bmc.PowerOn, errs: map[string]error{}}
		r := reconcilerFor(c, f)
		rec := events.NewFakeRecorder(100)
		r.Recorder = rec
		now := time.Now()
		r.clock = func() time.Time { return now }
		return f, r, c, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}, &now, rec
	}
	count := func(f *fakeBMC, call string) int {
		n := 0
		for _, c := range f.calls {
			if c == call {
				n++
			}
		}
		return n
	}
	sentAt := func(t *testing.T, c client.Client, key ctrl.Request) *metav1.Time {
		got := &infrav1.RedfishHost{}
		if err := c.Get(t.Context(), key.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got.Status.SoftPowerOffSentAt
	}
	t.Run("busy (409), then accepted", func(t *testing.T) {
		f, r, c, key, now, _ := setup(t)
		f.errs["Reset(GracefulShutdown)"] = fmt.Errorf("GracefulShutdown reset: %w", bmc.ErrConflict)
		if _, err := r.Reconcile(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		if at := sentAt(t, c, key); at != nil {
			t.Fatalf("softPowerOffSentAt %v after a refused press, want none", at)
		}
		delete(f.errs, "Reset(GracefulShutdown)")
		*now = now.Add(time.Second) // within PollInterval of the refused press
		if _, err := r.Reconcile(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		if n := count(f, "Reset(GracefulShutdown)"); n != 2 {
			t.Errorf("GracefulShutdown sent %d times, want 2: refused once, then pressed (calls %v)", n, f.calls)
		}
		if at := sentAt(t, c, key); at == nil {
			t.Errorf("the accepted press is not recorded")
		}
	})
	for name, refusal := range map[string]error{
		"not in the allowable values":  fmt.Errorf("GracefulShutdown reset: %w: the BMC allows [On ForceOff]", bmc.ErrNotSupported),
		"refused as unsupported (400)": &schemas.Error{HTTPReturnedStatusCode: 400, Message: "ActionParameterNotSupported"},
	} {
		t.Run(name, func(t *testing.T) {
			f, r, c, key, now, rec := setup(t)
			f.errs["Reset(GracefulShutdown)"] = refusal
			f.follows = true
			for range 3 {
				if _, err := r.Reconcile(t.Context(), key); err != nil {
					t.Fatal(err)
				}
				*now = now.Add(time.Second)
			}
			if n, m := count(f, "Reset(GracefulShutdown)"), count(f, "Reset(ForceOff)"); n != 1 || m != 1 {
				t.Errorf("GracefulShutdown sent %d times and ForceOff %d, want each once (calls %v)", n, m, f.calls)
			}
			if at := sentAt(t, c, key); at != nil {
				t.Errorf("softPowerOffSentAt %v, want none: nothing was pressed", at)
			}
			if got := drain(rec); !strings.Contains(got, "PowerOffForced") {
				t.Errorf("events %q, want PowerOffForced", got)
			}
		})
	}
	t.Run("refused otherwise (403): not pressed again, forced off at the timeout", func(t *testing.T) {
		f, r, _, key, now, _ := setup(t)
		f.errs["Reset(GracefulShutdown)"] = &schemas.Error{HTTPReturnedStatusCode: 403, Message: "Insufficient privilege"}
		r.SoftPowerOffTimeout = time.Minute
		for range 10 {
			_, _ = r.Reconcile(t.Context(), key) // the refusal is the round's error
			*now = now.Add(5 * time.Second)
		}
		*now = now.Add(time.Minute)
		if _, err := r.Reconcile(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		if n, m := count(f, "Reset(GracefulShutdown)"), count(f, "Reset(ForceOff)"); n != 1 || m != 1 {
			t.Errorf("GracefulShutdown sent %d times and ForceOff %d, want each once (calls %v)", n, m, f.calls)
		}
	})
	t.Run("the record cannot be written", func(t *testing.T) {
		h := claimedHost(infrav1.HostStateProvisioned)
		h.Status.Claim.Provisioned = true
		h.Status.PowerState = "On"
		h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "remediation/x", Mode: infrav1.RebootModeSoft}}
		base := newFakeClient(t, h, nil)
		fail := true
		c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				if fail {
					fail = false // the first write fails; the round's closing write goes through
					return errors.New("etcdserver: request timed out")
				}
				return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		})
		f := &fakeBMC{power: bmc.PowerOn}
		r := reconcilerFor(c, f)
		key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
		_, _ = r.Reconcile(t.Context(), key)
		if n := count(f, "Reset(GracefulShutdown)"); n != 0 {
			t.Errorf("pressed %d times without a record", n)
		}
		if at := sentAt(t, base, key); at != nil {
			t.Errorf("softPowerOffSentAt %v written for a press never made", at)
		}
	})
}

// A host deleted while its claim is being released (its Machine deleted a moment before, or the
// whole namespace going) keeps its finalizer until the release powered the server off and erased
// it as the claim asked: the next tenant of that server, registered again, finds nothing.
func TestAHostDeletedWhileReleasingIsPoweredOffAndErasedFirst(t *testing.T) {
	h := claimedHost(infrav1.HostStateProvisioned)
	h.Status.Claim.Release = true
	now := metav1.Now()
	h.DeletionTimestamp = &now
	c := newFakeClient(t, h, nil)
	f := &fakeBMC{power: bmc.PowerOn, eraseJobs: []bmc.EraseJob{{Drive: "/d/1", TaskURI: "/t/1"}}, tasks: map[string]*bmc.Task{"/t/1": {State: "Completed", Done: true}}}
	r := reconcilerFor(c, f)
	key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	round := func() *infrav1.RedfishHost {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		got := &infrav1.RedfishHost{}
		if err := c.Get(t.Context(), key.NamespacedName, got); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := round(); got == nil || !slices.Contains(f.calls, "Reset(ForceOff)") {
		t.Fatalf("after the first round: host %v, BMC calls %v; want the host kept and the server forced off", got != nil, f.calls)
	}
	f.power = bmc.PowerOff
	for range 5 {
		if round() == nil {
			break
		}
	}
	if !slices.Contains(f.calls, "EraseDrives") {
		t.Errorf("BMC calls %v: the host went without its drives erased", f.calls)
	}
	if got := round(); got != nil {
		t.Errorf("host still there in state %s (claim %+v): once released it must go", got.Status.State, got.Status.Claim)
	}
}

// A host deleted while the machine holding it is already gone (force-removed) does not wait for
// that machine forever: the claim is released after the orphan grace period, as for any host.
func TestAHostDeletedWhoseMachineIsGoneReleasesItsClaim(t *testing.T) {
	h := claimedHost(infrav1.HostStateProvisioned)
	now := metav1.Now()
	h.DeletionTimestamp = &now
	c := newFakeClient(t, h, nil)
	if err := c.Delete(t.Context(), &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1"}}); err != nil {
		t.Fatal(err)
	}
	r := reconcilerFor(c, &fakeBMC{power: bmc.PowerOn})
	key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	got := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), key.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if cl := got.Status.Claim; cl == nil || cl.ConsumerMissingSince == nil {
		t.Fatalf("claim %+v: want the missing consumer noticed", cl)
	}
	got.Status.Claim.ConsumerMissingSince = &metav1.Time{Time: time.Now().Add(-time.Hour)}
	if err := c.Status().Update(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), key.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if cl := got.Status.Claim; cl == nil || !cl.Release {
		t.Errorf("claim %+v: want it released once the grace period passed", cl)
	}
}

// A host's credentials Secret carries the host's finalizer while the host exists (a namespace
// deletion cannot take the credentials a release still needs), moves with spec.bmc.credentialsName
// and goes with the host.
func TestAHostKeepsItsCredentialsSecretUntilItIsGone(t *testing.T) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", UID: "uid-h1", Finalizers: []string{Finalizer}},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	h.Status.State, h.Status.RegisteredAddress = infrav1.HostStateAvailable, h.Spec.BMC.Address
	c := newFakeClient(t, h, nil)
	if err := c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds2", Labels: map[string]string{infrav1.BMCCredentialsLabel: "true"}},
		Data: map[string][]byte{"username": []byte("admin"), "password": []byte("pw2")}}); err != nil {
		t.Fatal(err)
	}
	r := reconcilerFor(c, &fakeBMC{power: bmc.PowerOff})
	key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	finalizers := func(name string) []string {
		t.Helper()
		s := &corev1.Secret{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: name}, s); err != nil {
			t.Fatal(err)
		}
		return s.Finalizers
	}
	const fin = CredentialsFinalizerPrefix + "uid-h1"
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if got := finalizers("creds"); !slices.Equal(got, []string{fin}) {
		t.Fatalf("creds finalizers %v, want the host's", got)
	}
	got := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), key.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	got.Spec.BMC.CredentialsName = "creds2"
	if err := c.Update(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if a, b := finalizers("creds"), finalizers("creds2"); len(a) != 0 || !slices.Equal(b, []string{fin}) {
		t.Fatalf("after the rename: creds %v, creds2 %v; want the finalizer moved", a, b)
	}
	if err := c.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if b := finalizers("creds2"); len(b) != 0 {
		t.Errorf("creds2 finalizers %v after the host's deletion, want none", b)
	}
	if err := c.Get(t.Context(), key.NamespacedName, got); !apierrors.IsNotFound(err) {
		t.Errorf("host still there (%v)", err)
	}
}

// A credentials finalizer of a host that no longer exists (clusterctl move copies a Secret's
// finalizers) does not pin the Secret for good: the next host to protect it drops it.
func TestAStaleCredentialsFinalizerIsDropped(t *testing.T) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", UID: "uid-h1", Finalizers: []string{Finalizer}},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	h.Status.State, h.Status.RegisteredAddress = infrav1.HostStateAvailable, h.Spec.BMC.Address
	c := newFakeClient(t, h, nil)
	s := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "creds"}, s); err != nil {
		t.Fatal(err)
	}
	s.Finalizers = []string{CredentialsFinalizerPrefix + "uid-gone", "example.com/keep"}
	if err := c.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	r := reconcilerFor(c, &fakeBMC{power: bmc.PowerOff})
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "creds"}, s); err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.com/keep", CredentialsFinalizerPrefix + "uid-h1"}; !slices.Equal(s.Finalizers, want) {
		t.Errorf("finalizers %v, want %v", s.Finalizers, want)
	}
}

// recreatedClaimedBy is a host recreated without status (a move, a restore) whose record names
// the RedfishMachine it was claimed by.
func recreatedClaimedBy(rm string) func(*infrav1.RedfishHost) {
	return func(h *infrav1.RedfishHost) {
		h.Status.State = infrav1.HostStateInspecting
		h.Annotations = map[string]string{infrav1.HostClaimedByAnnotation: rm}
	}
}

// drain returns the events recorded so far, one a line.
func drain(rec *events.FakeRecorder) string {
	var out []string
	for len(rec.Events) > 0 {
		out = append(out, <-rec.Events)
	}
	return strings.Join(out, "\n")
}

// A credentials Secret without the BMC-credentials label (created after its host, which admission
// only warned about, or its label removed later) is never sent to a BMC: the host says why in
// BMCReachable, and connects once the Secret is labelled.
func TestAnUnlabelledCredentialsSecretIsNeverSentToTheBMC(t *testing.T) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", UID: "uid-h1"},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	c := newFakeClient(t, h, nil)
	sec := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "creds"}, sec); err != nil {
		t.Fatal(err)
	}
	delete(sec.Labels, infrav1.BMCCredentialsLabel)
	if err := c.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	connections := 0
	r := reconcilerFor(c, &fakeBMC{power: bmc.PowerOff})
	r.BMCs = fakeBMCs{bmc: &fakeBMC{power: bmc.PowerOff}, connecting: func() { connections++ }}
	key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	for range 2 {
		_, _ = r.Reconcile(t.Context(), key)
	}
	got := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), key.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if connections != 0 {
		t.Errorf("%d connections made with an unlabelled Secret's credentials, want none", connections)
	}
	if cond := conditions.Get(got, infrav1.BMCReachableCondition); cond == nil || cond.Reason != infrav1.CredentialsNotLabelledReason || !strings.Contains(cond.Message, infrav1.BMCCredentialsLabel) {
		t.Errorf("BMCReachable %+v, want CredentialsNotLabelled naming the label", cond)
	}
	if _, err := r.Connect(t.Context(), got); err == nil || connections != 0 {
		t.Errorf("Connect (used by jobs and maintenances) = %v with %d connections, want refused", err, connections)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(sec), sec); err != nil {
		t.Fatal(err)
	}
	sec.Labels = map[string]string{infrav1.BMCCredentialsLabel: "true"}
	if err := c.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Reconcile(t.Context(), key)
	if connections == 0 {
		t.Errorf("no connection once the Secret is labelled")
	}
}

// An upgrade does not cut a running fleet off its BMCs: an unlabelled Secret that already carries
// this host's credentials finalizer (put there before the label was required) is still used, and
// no unlabelled Secret takes that finalizer now.
func TestAnUnlabelledSecretThisHostAlreadyUsedIsTrusted(t *testing.T) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", UID: "uid-h1"},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	c := newFakeClient(t, h, nil)
	sec := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "creds"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Labels = nil
	sec.Finalizers = []string{credentialsFinalizer(h)}
	if err := c.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	connections := 0
	r := reconcilerFor(c, &fakeBMC{power: bmc.PowerOff})
	r.BMCs = fakeBMCs{bmc: &fakeBMC{power: bmc.PowerOff}, connecting: func() { connections++ }}
	_, _ = r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)})
	if connections == 0 {
		t.Errorf("a Secret this host used before the label was required is no longer used")
	}
	other := &infrav1.RedfishHost{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h2", UID: "uid-h2"}}
	if _, _, err := r.target(t.Context(), &infrav1.RedfishHost{ObjectMeta: other.ObjectMeta, Spec: h.Spec}); err == nil {
		t.Errorf("another host naming the same unlabelled Secret is trusted too")
	}
}

// A host recreated with a record whose Cluster is paused (clusterctl move keeps it paused until
// everything is moved) waits for its machine past the grace period: it is neither erased nor
// offered while the move is under way.
func TestARestoredHostWaitsWithoutLimitWhileItsRecordedClusterIsPaused(t *testing.T) {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", Finalizers: []string{Finalizer},
			Annotations: map[string]string{infrav1.HostClaimedByAnnotation: "m0", infrav1.HostClaimedClusterAnnotation: "c1"}},
		Spec: infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
	}
	long := metav1.NewTime(time.Now().Add(-time.Hour))
	h.Status.State, h.Status.RegisteredAddress, h.Status.RestoreWaitSince = infrav1.HostStateInspecting, h.Spec.BMC.Address, &long
	c := newFakeClient(t, h, nil)
	cl := &clusterv1.Cluster{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "c1"}, cl); err != nil {
		t.Fatal(err)
	}
	cl.Spec.Paused = ptr.To(true)
	if err := c.Update(t.Context(), cl); err != nil {
		t.Fatal(err)
	}
	f := &fakeBMC{power: bmc.PowerOn}
	r := reconcilerFor(c, f)
	key := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	got := &infrav1.RedfishHost{}
	if err := c.Get(t.Context(), key.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.State != infrav1.HostStateInspecting || slices.ContainsFunc(f.calls, func(c string) bool { return strings.HasPrefix(c, "Reset") }) {
		t.Errorf("state %s, calls %v: want the host waiting, nothing sent, while its Cluster is paused", got.Status.State, f.calls)
	}
	cl.Spec.Paused = ptr.To(false)
	if err := c.Update(t.Context(), cl); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), key.NamespacedName, got); err != nil || got.Status.State != infrav1.HostStateDeprovisioning {
		t.Errorf("state %s (%v) once the Cluster is unpaused past the grace period, want Deprovisioning", got.Status.State, err)
	}
}
