// Package simos is the simulated operating system of the Redfish simulator's servers. It knows
// only what a real OS could: when a server boots provisioning media it does what a prebuilt image
// with cloud-init does: booted from the virtual CD, it reads the other attached media and takes
// the volume labelled cidata as its NoCloud seed; booted from the network, it takes the seed URL
// from its kernel command line (ds=nocloud-net;s=…, set by the iPXE script its firmware chained
// to); booted by UEFI HTTP, it takes the seed next to the URI it was booted from (which EFI
// exposes). It reads meta-data and user-data, and its "kubelet" registers a Node with the
// providerID from meta-data in the workload cluster. A live image runs from RAM and keeps nothing:
// only another boot of the image with its seed brings its Node back; booted from its drives
// instead, the server finds no OS (Blank). An image written to a drive (disk.go) comes back from it.
package simos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// OS simulates the operating system on every server of a fleet.
type OS struct {
	// Client writes Nodes into the workload cluster.
	Client client.Client
	// BootTime is how long the OS takes from the firmware handing over to the kubelet registering
	// (or readying) its Node. Default 0. Set it before Attach.
	BootTime time.Duration
	// InstallTime is how long a self-installing ISO takes from its boot to its power-off
	// (default 2s: a real one takes minutes, and the provider polls the power meanwhile).
	InstallTime time.Duration
	// RootCAs are the certificates the image (and the BMC reading its media) trusts for HTTPS;
	// nil: the system's. Set it before Attach.
	RootCAs *x509.CertPool

	mu      sync.Mutex
	fetched map[string][]string // server -> bootstrap data it fetched, in order
	booted  map[string][]string // server -> what each boot ran (see Booted)
	servers map[string]*simulator.Server
	errs    []error
}

// New returns a simulated OS writing Nodes with c.
func New(c client.Client) *OS {
	return &OS{Client: c, InstallTime: 2 * time.Second, fetched: map[string][]string{}, booted: map[string][]string{}, servers: map[string]*simulator.Server{}}
}

// Attach makes every server of the fleet run this OS.
func (o *OS) Attach(f *simulator.Fleet) {
	o.mu.Lock()
	for _, s := range f.Servers {
		o.servers[s.ID()] = s
	}
	o.mu.Unlock()
	f.OnBoot(o.boot)
}

// Fetched returns the bootstrap data each server fetched.
func (o *OS) Fetched() map[string][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string][]string{}
	for k, v := range o.fetched {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Booted returns what each boot of a server ran: LiveOS (a live image with its seed), the URL of
// a live image booted from a CD with no seed volume beside it (a service image), Blank (drives
// holding no OS), BIOSSetup, or what disk.go records (Deploy, Installer, DiskImage:<drive>,
// NotBootable).
func (o *OS) Booted(server string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.booted[server]...)
}

func (o *OS) record(server, what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.booted[server] = append(o.booted[server], what)
}

// Errors returns what went wrong while booting.
func (o *OS) Errors() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs...)
}

func (o *OS) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errs = append(o.errs, err)
}

const (
	// BIOSSetup is what Booted lists for a boot into the firmware's setup screen.
	BIOSSetup = "bios-setup"
	// LiveOS is what Booted lists for a boot of a live OS image with its seed (from the CD, by
	// PXE or by UEFI HTTP): cloud-init runs the bootstrap data, the kubelet registers its Node.
	LiveOS = "live-os"
	// Blank is what Booted lists for a boot from drives that hold no OS: nothing starts, no Node
	// comes back (what a live node becomes when it is booted without its media).
	Blank = "blank"
)

func (o *OS) boot(e simulator.BootEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+o.BootTime)
	defer cancel()
	var meta, userData string
	var err error
	switch e.Target {
	case "Cd":
		if e.MediaImage == "" {
			// An empty CD: the firmware goes on to the next device in its boot order, the drives.
			o.diskBoot(ctx, e)
			return
		}
		switch o.kindOf(ctx, e.MediaImage) {
		case kindDeploy:
			o.deploy(ctx, e)
			return
		case kindNode:
			// A disk image inserted as a CD: no firmware boots it.
			o.record(e.ServerID, NotBootable)
			return
		case kindInstaller:
			if err := o.installFromISO(ctx, e); err != nil {
				o.fail(fmt.Errorf("%s: %w", e.ServerID, err))
			}
			return
		}
		if !hasOtherMedia(e) {
			// A live image (diagnostics, a firmware updater): it runs from the CD, installs
			// nothing and registers no Node.
			o.record(e.ServerID, e.MediaImage)
			return
		}
		meta, userData, err = o.seedFromMedia(ctx, e)
	case "BiosSetup":
		// The server stops in its firmware's setup screen: no OS starts.
		o.record(e.ServerID, BIOSSetup)
		return
	case "UefiHttp":
		// The firmware loaded the image from the boot URI; a stock image finds its seed as on
		// a CD boot, by the label of a volume the BMC attached.
		meta, userData, err = o.seedFromMedia(ctx, e)
	case "Pxe":
		dir := seedFromCmdline(e.KernelCmdline)
		if dir == "" {
			o.fail(fmt.Errorf("%s: PXE boot without a NoCloud seed on the kernel command line %q", e.ServerID, e.KernelCmdline))
			return
		}
		meta, userData, err = o.fetchSeed(ctx, dir)
	default:
		o.diskBoot(ctx, e)
		return
	}
	if err != nil {
		o.fail(fmt.Errorf("%s: %s boot: %w", e.ServerID, e.Target, err))
		return
	}
	md := parseMeta(meta)
	o.record(e.ServerID, LiveOS)
	o.mu.Lock()
	o.fetched[e.ServerID] = append(o.fetched[e.ServerID], userData)
	o.mu.Unlock()
	time.Sleep(o.BootTime)
	if err := o.registerNode(ctx, md["local-hostname"], md["provider-id"], e); err != nil {
		o.fail(fmt.Errorf("%s: registering Node: %w", e.ServerID, err))
	}
}

// diskBoot is a boot from the drives: an OS image written there starts (see imageBoot); drives
// holding none start nothing. A live image "installs" nothing: booted from its drives, a live
// node is blank, and its Node stays as the power-off left it.
func (o *OS) diskBoot(ctx context.Context, e simulator.BootEvent) {
	done, err := o.imageBoot(ctx, e)
	if err != nil {
		o.fail(fmt.Errorf("%s: booting from disk: %w", e.ServerID, err))
	}
	if !done && err == nil {
		o.record(e.ServerID, Blank)
	}
}

func (o *OS) registerNode(ctx context.Context, name, providerID string, e simulator.BootEvent) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
	}
	if err := o.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := o.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	if node.Spec.ProviderID != providerID {
		return fmt.Errorf("a Node named %s already exists with providerID %q (want %q)", name, node.Spec.ProviderID, providerID)
	}
	// A merge patch, as a kubelet's status update would not fight CAPI labelling the Node.
	before := node.DeepCopy()
	setReady(node, e)
	return o.Client.Status().Patch(ctx, node, client.MergeFrom(before))
}

func setReady(node *corev1.Node, e simulator.BootEvent) {
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	// What a healthy kubelet reports; CAPI's NodeHealthy looks at all four.
	node.Status.Conditions = []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
	}
	mac := e.MACs[0]
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: node.Name},
		// 10.<fleet low byte>.<index high>.<index low>, from the simulator's MAC layout (simulator.MAC).
		{Type: corev1.NodeInternalIP, Address: "10." + hexByte(mac[6:8]) + "." + hexByte(mac[9:11]) + "." + hexByte(mac[12:14])},
	}
}

func hexByte(h string) string {
	var n int
	_, _ = fmt.Sscanf(h, "%x", &n)
	return fmt.Sprint(n)
}

// seedFromMedia reads every medium attached besides the CD it booted from, as cloud-init scans
// block devices, and takes the one labelled cidata.
func (o *OS) seedFromMedia(ctx context.Context, e simulator.BootEvent) (string, string, error) {
	slots := make([]string, 0, len(e.Media))
	for slot := range e.Media {
		slots = append(slots, slot)
	}
	sort.Strings(slots)
	var seen []string
	for _, slot := range slots {
		image := e.Media[slot]
		if image == e.MediaImage {
			continue // the boot CD: the OS image itself
		}
		data, err := o.get(ctx, image)
		if err != nil {
			return "", "", fmt.Errorf("reading the medium in %s: %w", slot, err)
		}
		label, files, err := seed.ReadVolume([]byte(data))
		if err != nil {
			return "", "", fmt.Errorf("reading the medium in %s: %w", slot, err)
		}
		seen = append(seen, slot+"="+label)
		if label == seed.CIDataLabel {
			return string(files["meta-data"]), string(files["user-data"]), nil
		}
	}
	return "", "", fmt.Errorf("no volume labelled %s among the attached media %v", seed.CIDataLabel, seen)
}

// hasOtherMedia says whether a medium besides the boot CD is attached.
func hasOtherMedia(e simulator.BootEvent) bool {
	for _, image := range e.Media {
		if image != "" && image != e.MediaImage {
			return true
		}
	}
	return false
}

// seedFromCmdline returns s= of a ds=nocloud-net;s=<url> kernel argument.
func seedFromCmdline(cmdline string) string {
	for _, arg := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(arg, "ds=nocloud-net;"); ok {
			for _, kv := range strings.Split(v, ";") {
				if u, ok := strings.CutPrefix(kv, "s="); ok {
					return u
				}
			}
		}
	}
	return ""
}

// fetchSeed reads meta-data and user-data of a NoCloud-net seed folder.
func (o *OS) fetchSeed(ctx context.Context, dir string) (string, string, error) {
	if dir == "" {
		return "", "", errors.New("no seed URL")
	}
	meta, err := o.get(ctx, dir+"meta-data")
	if err != nil {
		return "", "", fmt.Errorf("meta-data: %w", err)
	}
	userData, err := o.get(ctx, dir+"user-data")
	if err != nil {
		return "", "", fmt.Errorf("user-data: %w", err)
	}
	return meta, userData, nil
}

func parseMeta(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// get reads url, retrying an answer that asks to (429, 503) after its Retry-After, up to ten
// times, as cloud-init's url helper retries a NoCloud seed.
func (o *OS) get(ctx context.Context, url string) (string, error) {
	for attempt := 1; ; attempt++ {
		body, retryAfter, err := o.getOnce(ctx, url)
		if retryAfter == 0 || attempt == 10 {
			return body, err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(retryAfter):
		}
	}
}

func (o *OS) getOnce(ctx context.Context, url string) (string, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	c := http.DefaultClient
	if o.RootCAs != nil {
		c = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}}}
		defer c.CloseIdleConnections()
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", 0, err
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			wait := time.Second
			if n, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && n > 0 {
				wait = time.Duration(n) * time.Second
			}
			return "", wait, err
		}
		return "", 0, err
	}
	return string(body), 0, nil
}
