package host

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

const digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// diskClaim is the claim of m1 with a raw image on drive Disk1.
func diskClaim(format infrav1.ImageFormat) func(*infrav1.RedfishHost) {
	return claimOf(infrav1.HostStateProvisioning, func(c *infrav1.HostClaim) {
		c.Image = &infrav1.Image{URL: "https://images.example/node.raw", Format: format, Checksum: digest}
		if format == infrav1.ImageFormatISO {
			c.Image = &infrav1.Image{URL: "https://images.example/installer.iso", Format: format}
		}
		c.RootDevice = &infrav1.RootDevice{Name: "Disk1", SerialNumber: "S1", WWN: "5002538e00000001"}
	})
}

func installing(sawOn bool, since time.Duration) func(*infrav1.RedfishHost) {
	return func(h *infrav1.RedfishHost) {
		at := metav1.NewTime(time.Now().Add(-since))
		h.Status.Install = &infrav1.InstallStatus{Phase: infrav1.InstallPhaseInstalling, BootIssuedAt: &at, PowerOnSentAt: &at, SawPowerOn: sawOn}
	}
}

// received is a report's receivedAt, as the seed server sets it: now.
func received() string { return `,"receivedAt":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"` }

// installRound runs one reconcile of a host installing to disk: report is the seed Secret's
// install report ("" for none). It returns the host after the round and the BMC calls.
func installRound(t *testing.T, h *infrav1.RedfishHost, power bmc.PowerState, report, deployImage string, wrap ...func(client.Client) client.Client) (*infrav1.RedfishHost, []string, ctrl.Result) {
	t.Helper()
	return installRoundWith(t, h, &fakeBMC{power: power}, report, deployImage, wrap...)
}

func installRoundWith(t *testing.T, h *infrav1.RedfishHost, f *fakeBMC, report, deployImage string, wrap ...func(client.Client) client.Client) (*infrav1.RedfishHost, []string, ctrl.Result) {
	t.Helper()
	c := newFakeClient(t, h, nil)
	if report != "" {
		sec := &corev1.Secret{}
		key := client.ObjectKey{Namespace: "ns", Name: seed.SecretName("m1")}
		if err := c.Get(context.Background(), key, sec); err != nil {
			t.Fatal(err)
		}
		sec.Data[seed.KeyInstallReport] = []byte(report)
		if err := c.Update(context.Background(), sec); err != nil {
			t.Fatal(err)
		}
	}
	rc := c
	for _, w := range wrap {
		rc = w(c)
	}
	r := &Reconciler{Client: rc, APIReader: c, BMCs: fakeBMCs{bmc: f}, SeedBaseURL: "http://seed.example", DeployImageURL: deployImage,
		PollInterval: 2 * time.Second, RetryInterval: 30 * time.Second, CheckInterval: time.Minute, InstallTimeout: 10 * time.Minute,
		OrphanGracePeriod: 2 * time.Minute, RestoreGracePeriod: 2 * time.Minute}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)})
	if err != nil && len(wrap) == 0 { // a wrapped client fails on purpose
		t.Fatalf("reconcile: %v", err)
	}
	got := &infrav1.RedfishHost{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(h), got); err != nil {
		t.Fatal(err)
	}
	return got, f.calls, res
}

func newHost(mutate ...func(*infrav1.RedfishHost)) *infrav1.RedfishHost {
	h := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h1", Finalizers: []string{Finalizer}},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: "redfish://10.0.0.1/redfish/v1/Systems/1", CredentialsName: "creds"}},
		Status:     infrav1.RedfishHostStatus{RegisteredAddress: "redfish://10.0.0.1/redfish/v1/Systems/1"},
	}
	for _, m := range mutate {
		m(h)
	}
	return h
}

func TestAnInstallToDiskIsBootedOnceAndItsDriveOnlyOnceVerified(t *testing.T) {
	const deploy = "https://images.example/deploy-live.iso"
	for _, tc := range []struct {
		name      string
		host      []func(*infrav1.RedfishHost)
		power     bmc.PowerState
		report    string
		noDeploy  bool
		insertErr error
		calls     []string
		phase     infrav1.InstallPhase // "" for no install status
		condition string               // ImageInstalled Status/Reason
		message   string               // in the condition's message
	}{
		{name: "a raw image: the deploy image and its volume attached, the boot recorded, then the power-on",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw)}, power: bmc.PowerOff,
			calls: []string{"InsertMedia(deploy-live.iso,deploy.iso)", "SetBootOverride(Cd,Continuous)", "Reset(On)"}, phase: infrav1.InstallPhaseInstalling,
			condition: "False/Installing", message: "Disk1 (wwn 5002538e00000001)"},
		{name: "a self-installing ISO: the image itself and the claim's seed volume",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatISO)}, power: bmc.PowerOff,
			calls: []string{"InsertMedia(image,cidata.iso)", "SetBootOverride(Cd)", "Reset(On)"}, phase: infrav1.InstallPhaseInstalling, condition: "False/Installing"},
		{name: "no deploy image named: waits, nothing sent",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw)}, power: bmc.PowerOff, noDeploy: true,
			condition: "False/NoDeployImage", message: "--deploy-image-url"},
		{name: "installing and on (the power-on's answer lost): nothing sent again",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(false, time.Second)}, power: bmc.PowerOn,
			phase: infrav1.InstallPhaseInstalling},
		{name: "installing, the power-on sent and not seen landing yet: not sent again",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(false, time.Second)}, power: bmc.PowerOff,
			phase: infrav1.InstallPhaseInstalling},
		{name: "the boot recorded by a round that stopped before its power-on: the one power-on",
			host:  []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(false, time.Second), func(h *infrav1.RedfishHost) { h.Status.Install.PowerOnSentAt = nil }},
			power: bmc.PowerOff, calls: []string{"Reset(On)"}, phase: infrav1.InstallPhaseInstalling},
		{name: "off, never seen on, long after its power-on: failed, not powered on again",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(false, 5*time.Minute)}, power: bmc.PowerOff,
			phase: infrav1.InstallPhaseFailed, condition: "False/InstallFailed", message: "not powered on again"},
		{name: "a report received before the deploy image was booted: failed, the drive never booted",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute)}, power: bmc.PowerOff,
			report: `{"ok":true,"sizeBytes":1,"checksum":"` + digest + `","receivedAt":"` + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano) + `"}`,
			phase:  infrav1.InstallPhaseFailed, condition: "False/InstallFailed", message: "came before the deploy image was powered on"},
		{name: "the power-on refused, the host on all the same and then off without a report: failed, not powered on again",
			host:  []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute), func(h *infrav1.RedfishHost) { h.Status.Install.PowerOnSentAt = nil }},
			power: bmc.PowerOff, phase: infrav1.InstallPhaseFailed, condition: "False/InstallFailed", message: "without reporting"},
		{name: "a power-on refused for good: the install timeout still applies",
			host:  []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(false, time.Hour), func(h *infrav1.RedfishHost) { h.Status.Install.PowerOnSentAt = nil }},
			power: bmc.PowerOff, phase: infrav1.InstallPhaseFailed, condition: "False/InstallTimedOut"},
		{name: "a report while the deploy image was never powered on: failed",
			host:  []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(false, time.Second), func(h *infrav1.RedfishHost) { h.Status.Install.PowerOnSentAt = nil }},
			power: bmc.PowerOff, report: `{"ok":true,"sizeBytes":1,"checksum":"` + digest + `"` + received() + `}`,
			phase: infrav1.InstallPhaseFailed, condition: "False/InstallFailed", message: "before the deploy image was powered on"},
		{name: "on a single-slot BMC: said, nothing booted",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw)}, power: bmc.PowerOff, insertErr: bmc.ErrNoSeedSlot,
			calls: []string{"InsertMedia(deploy-live.iso,deploy.iso)"}, condition: "False/NoSeedMediaSlot", message: "single virtual media device"},
		{name: "written, the machine's digest reported: installed, nothing sent this round",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute)}, power: bmc.PowerOff,
			report: `{"ok":true,"device":"/dev/sdb (wwn 5002538e00000001)","sizeBytes":1234,"checksum":"` + strings.ToUpper(digest) + `"` + received() + `}`,
			phase:  infrav1.InstallPhaseInstalled, condition: "True/Installed", message: "1234 bytes written to /dev/sdb"},
		{name: "written, another digest reported: failed, forced off",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute)}, power: bmc.PowerOn,
			report: `{"ok":true,"sizeBytes":1234,"checksum":"` + strings.Repeat("0", 64) + `"` + received() + `}`,
			calls:  []string{"Reset(ForceOff)"}, phase: infrav1.InstallPhaseFailed, condition: "False/ChecksumMismatch", message: "not the machine's " + digest},
		{name: "a mismatch reported: both digests said, the drive never booted",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute)}, power: bmc.PowerOff,
			report: `{"ok":false,"reason":"ChecksumMismatch","message":"node.raw has sha256sum REDACTED","checksum":"` + strings.Repeat("ab", 32) + `"` + received() + `}`,
			phase:  infrav1.InstallPhaseFailed, condition: "False/ChecksumMismatch", message: "node.raw downloaded by the deploy image has sha256 " + strings.Repeat("ab", 32) + ", not " + digest},
		{name: "a failure reported: its words, redacted",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute)}, power: bmc.PowerOff,
			report: `{"ok":false,"reason":"InstallFailed","message":"curl: (22) https://u:s3cret@images.example/node.raw 404"` + received() + `}`,
			phase:  infrav1.InstallPhaseFailed, condition: "False/InstallFailed", message: "https://REDACTED@images.example"},
		{name: "off after it was seen on, no report: failed, never booted",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute)}, power: bmc.PowerOff,
			phase: infrav1.InstallPhaseFailed, condition: "False/InstallFailed", message: "without reporting"},
		{name: "no outcome within the install timeout: failed",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Hour)}, power: bmc.PowerOn,
			phase: infrav1.InstallPhaseFailed, condition: "False/InstallTimedOut", message: "10m0s"},
		{name: "a self-installing ISO off after it was seen on: installed",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatISO), installing(true, time.Minute)}, power: bmc.PowerOff,
			phase: infrav1.InstallPhaseInstalled, condition: "True/Installed"},
		{name: "failed and off: stays off, nothing sent",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute), func(h *infrav1.RedfishHost) {
				h.Status.Install.Phase = infrav1.InstallPhaseFailed
			}}, power: bmc.PowerOff, phase: infrav1.InstallPhaseFailed},
		{name: "installed: the deploy media out, the seed volume in, a one-time boot from the drive",
			host: []func(*infrav1.RedfishHost){diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute), func(h *infrav1.RedfishHost) {
				h.Status.Install.Phase = infrav1.InstallPhaseInstalled
			}}, power: bmc.PowerOff,
			calls: []string{"EjectMedia", "InsertMedia(,cidata.iso)", "SetBootOverride(Hdd)", "Reset(On)"}, phase: infrav1.InstallPhaseInstalled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			image := deploy
			if tc.noDeploy {
				image = ""
			}
			f := &fakeBMC{power: tc.power}
			if tc.insertErr != nil {
				f.errs = map[string]error{"InsertMedia": tc.insertErr}
			}
			got, calls, _ := installRoundWith(t, newHost(tc.host...), f, tc.report, image)
			if !slices.Equal(calls, tc.calls) {
				t.Errorf("BMC calls %v, want %v", calls, tc.calls)
			}
			switch {
			case tc.phase == "" && got.Status.Install != nil:
				t.Errorf("install %+v, want none", got.Status.Install)
			case tc.phase != "" && (got.Status.Install == nil || got.Status.Install.Phase != tc.phase):
				t.Errorf("install %+v, want phase %s", got.Status.Install, tc.phase)
			}
			if tc.phase == infrav1.InstallPhaseFailed && got.Status.BootIssuedAt != nil {
				t.Errorf("a failed install's drive was booted")
			}
			if tc.condition != "" {
				c := conditions.Get(got, infrav1.ImageInstalledCondition)
				if c == nil || string(c.Status)+"/"+c.Reason != tc.condition || !strings.Contains(c.Message, tc.message) {
					t.Errorf("ImageInstalled %v, want %s saying %q", c, tc.condition, tc.message)
				}
				if c != nil && strings.Contains(c.Message, "s3cret") {
					t.Errorf("a password reached the condition: %s", c.Message)
				}
			}
		})
	}
}

// The boot into the deploy image is stored before its power-on is sent: a write that fails
// sends nothing.
func TestNoPowerOnIntoTheDeployImageWhoseBootWasNotStored(t *testing.T) {
	failWrites := func(c client.Client) client.Client {
		return interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
			SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
				return errors.New("the API server is unreachable")
			},
		})
	}
	f := &fakeBMC{power: bmc.PowerOff}
	h := newHost(diskClaim(infrav1.ImageFormatRaw))
	cl := newFakeClient(t, h, nil)
	r := &Reconciler{Client: failWrites(cl), APIReader: cl, BMCs: fakeBMCs{bmc: f}, SeedBaseURL: "http://seed.example", DeployImageURL: "https://images.example/deploy.iso",
		PollInterval: 2 * time.Second, RetryInterval: 30 * time.Second, CheckInterval: time.Minute, InstallTimeout: 10 * time.Minute,
		OrphanGracePeriod: 2 * time.Minute, RestoreGracePeriod: 2 * time.Minute}
	_, _ = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(h)})
	if !slices.Contains(f.calls, "InsertMedia(deploy.iso,deploy.iso)") || slices.Contains(f.calls, "Reset(On)") {
		t.Errorf("BMC calls %v: want the deploy image prepared, and no power-on for a boot that was not stored", f.calls)
	}
}

// A failed install's deploy image and its Continuous boot override leave with the release.
func TestAReleasedFailedInstallTakesTheDeployImageAndItsOverrideAlong(t *testing.T) {
	h := newHost(diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute), func(h *infrav1.RedfishHost) {
		h.Status.Install.Phase = infrav1.InstallPhaseFailed
		h.Status.State = infrav1.HostStateDeprovisioning
		h.Status.Claim.Release = true
	})
	got, calls, _ := installRound(t, h, bmc.PowerOff, "", "https://images.example/deploy-live.iso")
	want := []string{"EjectMedia(/v1/ns/m1/)", "EjectMedia", "SetBootOverride(None)"}
	if len(calls) < 3 || !slices.Equal(calls[:3], want) {
		t.Errorf("BMC calls %v, want first %v", calls, want)
	}
	if got.Status.Install != nil {
		t.Errorf("install %+v left on a released host", got.Status.Install)
	}

	// Released between the report and the drive boot (Installed, the override still to the
	// deploy image), with the manager's deploy image URL changed meanwhile: cleared all the same.
	h = newHost(diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute), func(h *infrav1.RedfishHost) {
		h.Status.Install.Phase = infrav1.InstallPhaseInstalled
		h.Status.State = infrav1.HostStateDeprovisioning
		h.Status.Claim.Release = true
	})
	if _, calls, _ = installRound(t, h, bmc.PowerOff, "", "https://images.example/deploy-v2.iso"); len(calls) < 3 || !slices.Equal(calls[:3], want) {
		t.Errorf("released after its report: BMC calls %v, want first %v", calls, want)
	}

	// A BMC that cannot clear the override: the media are out, the release goes on.
	h = newHost(diskClaim(infrav1.ImageFormatRaw), installing(true, time.Minute), func(h *infrav1.RedfishHost) {
		h.Status.Install.Phase = infrav1.InstallPhaseFailed
		h.Status.State = infrav1.HostStateDeprovisioning
		h.Status.Claim.Release = true
	})
	f := &fakeBMC{power: bmc.PowerOff, errs: map[string]error{"SetBootOverride(None)": bmc.ErrNotSupported}}
	got, _, _ = installRoundWith(t, h, f, "", "https://images.example/deploy-live.iso")
	if got.Status.Install != nil || got.Status.State == infrav1.HostStateDeprovisioning {
		t.Errorf("state %s, install %+v: a BMC refusing to clear its override held the release", got.Status.State, got.Status.Install)
	}
}

// A power-on into the deploy image whose record could not be stored is not recorded by the
// round's closing write either: the next round sends it, instead of failing the install.
func TestAPowerOnWhoseRecordFailedIsNotRecordedAsSent(t *testing.T) {
	n := 0
	failSecond := func(c client.Client) client.Client {
		return interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				if n++; n == 2 {
					return errors.New("the API server is unreachable")
				}
				return c.SubResource(sub).Patch(ctx, o, p, opts...)
			},
		})
	}
	got, calls, _ := installRound(t, newHost(diskClaim(infrav1.ImageFormatRaw)), bmc.PowerOff, "", "https://images.example/deploy.iso", failSecond)
	if slices.Contains(calls, "Reset(On)") {
		t.Errorf("BMC calls %v: a power-on whose record failed was sent", calls)
	}
	if got.Status.Install == nil || got.Status.Install.BootIssuedAt == nil || got.Status.Install.PowerOnSentAt != nil {
		t.Errorf("install %+v: want the boot recorded and no power-on recorded", got.Status.Install)
	}
}
