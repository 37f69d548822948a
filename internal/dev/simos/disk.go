package simos

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simdisk"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// What the simulated images hold. A test's image server serves them; the simulated server knows
// what it booted only by reading it, as a real one runs whatever the medium holds.
const (
	// DeployMagic starts the simulated deploy image: a live ISO whose cloud-init runs a
	// user-data script with bash (and the real tools of this machine) against the server's drives.
	DeployMagic = "#caprf-sim deploy-image v1\n"
	// NodeMagic starts a simulated node OS disk image (image-builder's raw output): written to a
	// drive and booted from it, its cloud-init reads the attached cidata volume on the first boot
	// of an instance, its kubelet registers the Node, and the state it keeps on the drive brings
	// the same Node back on every later boot.
	NodeMagic = "#caprf-sim node-image v1\n"
	// InstallerMagic starts a simulated self-installing ISO (Fedora CoreOS / Flatcar with an
	// install target, Talos, Ubuntu autoinstall): the node image it installs follows the header.
	// Booted, it writes that image to the drive the seed's meta-data names (root-device-wwn, else
	// root-device-serial), takes InstallTime, and powers the server off.
	InstallerMagic = "#caprf-sim installer-iso v1\n"
	// Installer is what Booted lists for a boot into a self-installing ISO.
	Installer = "installer"
	// NotBootable is what Booted lists for a CD boot of a disk image (no firmware boots it).
	NotBootable = "not-bootable"
	// Deploy is what Booted lists for a boot into the deploy image.
	Deploy = "deploy"
	// DiskImage is what Booted lists for a boot of an OS image from a drive ("<DiskImage>:<drive>").
	DiskImage = "disk-image"
)

// stateSize is the block at the end of a drive where the simulated OS keeps its state (its
// /var/lib: the instance it was set up for and the kubelet's Node).
const stateSize = 4096

// InstallerISO returns a simulated self-installing ISO that installs node.
func InstallerISO(node []byte) []byte { return append([]byte(InstallerMagic), node...) }

// DeployImage returns a simulated deploy ISO.
func DeployImage() []byte { return []byte(DeployMagic + "cloud-init nocloud; bash curl qemu-img\n") }

// NodeImage returns a simulated node disk image of size bytes (at least the header) naming
// version; the bytes after the header are a pattern of version, so two versions differ.
func NodeImage(version string, size int) []byte {
	head := NodeMagic + "version=" + version + "\n"
	b := bytes.Repeat([]byte(version+"."), size/(len(version)+1)+1)
	copy(b, head)
	return b[:max(size, len(head))]
}

type imageKind int

const (
	kindLive imageKind = iota
	kindDeploy
	kindNode
	kindInstaller
)

// kindOf reads the start of a boot medium. An image the simulator cannot fetch stands for a live
// node ISO (the suite's images.example URLs).
func (o *OS) kindOf(ctx context.Context, url string) imageKind {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return kindLive
	}
	req.Header.Set("Range", "bytes=0-63")
	c := o.httpClient()
	defer c.CloseIdleConnections() // a client per call: its connections go with it
	resp, err := c.Do(req)
	if err != nil {
		return kindLive
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	switch {
	case resp.StatusCode >= 300:
		return kindLive
	case bytes.HasPrefix(head, []byte(DeployMagic)):
		return kindDeploy
	case bytes.HasPrefix(head, []byte(NodeMagic)):
		return kindNode
	case bytes.HasPrefix(head, []byte(InstallerMagic)):
		return kindInstaller
	}
	return kindLive
}

func (o *OS) httpClient() *http.Client {
	if o.RootCAs == nil {
		return http.DefaultClient
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12}}}
}

// deploy runs the deploy image: cloud-init takes the cidata volume and runs its user-data script
// with bash against the server's drives; the script's poweroff powers the server off.
func (o *OS) deploy(ctx context.Context, e simulator.BootEvent) {
	o.record(e.ServerID, Deploy)
	srv := o.server(e.ServerID)
	if srv == nil {
		o.fail(fmt.Errorf("%s: deploy image booted on a server the OS is not attached to", e.ServerID))
		return
	}
	_, userData, err := o.seedFromMedia(ctx, e)
	if err != nil {
		o.fail(fmt.Errorf("%s: deploy image: %w", e.ServerID, err))
		return
	}
	if !strings.HasPrefix(userData, "#!") {
		o.fail(fmt.Errorf("%s: deploy image: the user-data is not a script (cloud-init would not run it)", e.ServerID))
		return
	}
	drives, err := srv.Drives()
	if err != nil {
		o.fail(fmt.Errorf("%s: deploy image: %w", e.ServerID, err))
		return
	}
	disks := make([]simdisk.Drive, 0, len(drives))
	for _, d := range drives {
		disks = append(disks, simdisk.Drive{Path: d.Path, Serial: d.Serial, WWN: d.WWN})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// A failed script reported it (or the provider times it out): its console is not kept.
	res, _ := simdisk.Run(ctx, []byte(userData), disks)
	if res.PoweredOff {
		srv.PowerOffFromOS()
	}
}

func (o *OS) server(id string) *simulator.Server {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.servers[id]
}

// imageBoot boots the first drive holding a node image, as firmware tries the drives in order.
// False when no drive holds one. On the first boot of an instance (a cidata volume naming an
// instance-id the drive has not been set up for) cloud-init reads the seed and the kubelet
// registers its Node; on every later boot the state on the drive brings the same Node back.
func (o *OS) imageBoot(ctx context.Context, e simulator.BootEvent) (bool, error) {
	srv := o.server(e.ServerID)
	if srv == nil {
		return false, nil
	}
	drives, err := srv.Drives()
	if err != nil {
		return false, err
	}
	for _, d := range drives {
		f, err := os.OpenFile(d.Path, os.O_RDWR, 0)
		if err != nil {
			return false, err
		}
		done, err := o.bootDrive(ctx, e, d, f)
		_ = f.Close()
		if done || err != nil {
			return done, err
		}
	}
	return false, nil
}

func (o *OS) bootDrive(ctx context.Context, e simulator.BootEvent, d simulator.Drive, f *os.File) (bool, error) {
	head := make([]byte, len(NodeMagic))
	if _, err := f.ReadAt(head, 0); err != nil || string(head) != NodeMagic {
		return false, nil
	}
	st, err := f.Stat()
	if err != nil {
		return true, err
	}
	stateAt := st.Size() - stateSize
	state := make([]byte, stateSize)
	if _, err := f.ReadAt(state, stateAt); err != nil {
		return true, err
	}
	kept := parseMeta(string(bytes.TrimRight(state, "\x00")))
	o.record(e.ServerID, DiskImage+":"+d.ID)
	var meta, userData string
	if len(e.Media) > 0 {
		if meta, userData, err = o.seedFromMedia(ctx, e); err != nil {
			meta = "" // no cidata attached: cloud-init finds no new instance
		}
	}
	md := parseMeta(meta)
	if md["instance-id"] != "" && md["instance-id"] != kept["instance-id"] {
		// A new instance: cloud-init runs the bootstrap data, the kubelet joins.
		o.mu.Lock()
		o.fetched[e.ServerID] = append(o.fetched[e.ServerID], userData)
		o.mu.Unlock()
		block := make([]byte, stateSize)
		copy(block, fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\nprovider-id: %s\n", md["instance-id"], md["local-hostname"], md["provider-id"]))
		if _, err := f.WriteAt(block, stateAt); err != nil {
			return true, err
		}
		time.Sleep(o.BootTime)
		return true, o.registerNode(ctx, md["local-hostname"], md["provider-id"], e)
	}
	if kept["local-hostname"] == "" {
		return true, nil // never set up: the OS waits for a seed, no Node
	}
	time.Sleep(o.BootTime)
	return true, o.registerNode(ctx, kept["local-hostname"], kept["provider-id"], e)
}

// installFromISO runs a self-installing ISO: the node image it carries goes to the drive its
// seed names; then the server powers off.
func (o *OS) installFromISO(ctx context.Context, e simulator.BootEvent) error {
	o.record(e.ServerID, Installer)
	srv := o.server(e.ServerID)
	if srv == nil {
		return fmt.Errorf("installer booted on a server the OS is not attached to")
	}
	iso, err := o.get(ctx, e.MediaImage)
	if err != nil {
		return fmt.Errorf("reading the installer: %w", err)
	}
	meta, _, err := o.seedFromMedia(ctx, e)
	if err != nil {
		return fmt.Errorf("installer: %w", err)
	}
	md := parseMeta(meta)
	wwn, serial := strings.Trim(md["root-device-wwn"], `"`), strings.Trim(md["root-device-serial"], `"`)
	drives, err := srv.Drives()
	if err != nil {
		return err
	}
	for _, d := range drives {
		if (wwn != "" && d.WWN == wwn) || (wwn == "" && serial != "" && d.Serial == serial) {
			f, err := os.OpenFile(d.Path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, werr := f.WriteAt([]byte(iso[len(InstallerMagic):]), 0)
			if err := errors.Join(werr, f.Close()); err != nil {
				return err
			}
			time.Sleep(o.InstallTime)
			srv.PowerOffFromOS()
			return nil
		}
	}
	return fmt.Errorf("installer: no drive with wwn %q or serial %q", wwn, serial)
}
