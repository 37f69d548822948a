package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/sample"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// readDrive returns the first n bytes of a simulated server's drive (its file is sparse, of the
// drive's full capacity: never read whole).
func readDrive(srv *simulator.Server, id string, n int) []byte {
	GinkgoHelper()
	drives, err := srv.Drives()
	Expect(err).NotTo(HaveOccurred())
	for _, d := range drives {
		if d.ID != id {
			continue
		}
		f, err := os.Open(d.Path)
		Expect(err).NotTo(HaveOccurred())
		defer f.Close()
		b := make([]byte, n)
		_, err = io.ReadFull(f, b)
		Expect(err).NotTo(HaveOccurred())
		return b
	}
	Fail("no drive " + id + " on " + srv.ID())
	return nil
}

func zeros(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

// qcow2Of converts a raw image with the real qemu-img, as image-builder's qcow2 output is made.
func qcow2Of(raw []byte) []byte {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	in, out := filepath.Join(dir, "in.raw"), filepath.Join(dir, "out.qcow2")
	Expect(os.WriteFile(in, raw, 0o600)).To(Succeed())
	cmd := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", in, out)
	b, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "qemu-img (Debian: qemu-utils; .ci/run installs it): %s", b)
	q, err := os.ReadFile(out)
	Expect(err).NotTo(HaveOccurred())
	return q
}

var _ = Describe("Installing images to disk", func() {
	It("writes raw and qcow2 images to the hinted drive on every virtual-media profile, never boots a mismatching image, installs a self-installing ISO, and reboots the installed Node without a new install",
		Label("disk-install-raw", "disk-install-qcow2", "image-checksum", "root-device-hints", "self-installing-iso", "reboot-from-disk"), func() {
			const fleetHosts = 8 // hosts 1..8: every virtual-media profile at least once
			roles := func(i int) string {
				switch {
				case i == 0:
					return "control-plane"
				case i <= fleetHosts:
					return "fleet"
				}
				return "odd"
			}
			var profiles []simulator.Profile
			for i := range fleetHosts + 2 {
				profiles = append(profiles, simulator.Profiles[mediaProfiles[i%len(mediaProfiles)]])
			}
			b := startBed("disk", fleetHosts+2, bedOptions{withOS: true, fleet: simulator.FleetOptions{Profiles: profiles},
				mutate: func(i int, h *infrav1.RedfishHost) {
					h.Labels = map[string]string{profileLabel: profiles[i].Name, "role": roles(i)}
					switch roles(i) {
					case "control-plane":
						h.Labels[profileLabel] = "control-plane"
					case "fleet":
						// Both drives are alike: without the hint the smaller name (Disk0) would be taken.
						h.Spec.RootDeviceHints = &infrav1.RootDeviceHints{DeviceName: "Disk1"}
					case "odd":
						h.Spec.RootDeviceHints = &infrav1.RootDeviceHints{SerialNumber: "NO-SUCH-SERIAL"}
					}
				}})
			b.waitHostsAvailable(fleetHosts + 2)
			Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "image-ca"},
				Data: map[string][]byte{"ca.crt": seedCertPEM}})).To(Succeed())
			v1, v2 := simos.NodeImage("v1", 3<<20+17), simos.NodeImage("v2", 2<<20+5) // v2 shorter: what v1 left must be erased
			rawURL, rawSum := diskImages.publish("/"+b.ns+"/node-v1.raw", v1)
			qcowURL, qcowSum := diskImages.publish("/"+b.ns+"/node-v2.qcow2", qcow2Of(v2))
			wrong := sha256.Sum256([]byte("another build"))

			var odd *simulator.Server
			var fleet []*simulator.Server
			for i, srv := range b.fleet.Servers {
				switch roles(i) {
				case "fleet":
					fleet = append(fleet, srv)
				case "odd":
					odd = srv
				}
			}

			By("a host none of whose drives matches its hints saying so, the others naming the hinted drive")
			Eventually(func(g Gomega) {
				for _, h := range b.hosts() {
					c := conditions.Get(&h, infrav1.RootDeviceFoundCondition)
					g.Expect(c).NotTo(BeNil(), "host %s has no RootDeviceFound", h.Name)
					switch h.Labels["role"] {
					case "odd":
						g.Expect(c.Reason).To(Equal(infrav1.NoMatchingDriveReason))
						g.Expect(c.Message).To(ContainSubstring("serial number is not NO-SUCH-SERIAL"))
					case "fleet":
						g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
						g.Expect(c.Message).To(ContainSubstring("Disk1"))
					}
				}
			}).Should(Succeed())

			b.createCluster("disk")
			b.controlPlaneOnLabelled()
			b.template("odd", infrav1.RedfishMachineSpec{
				HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "odd"}},
				Image:        &infrav1.Image{URL: rawURL, Checksum: hex.EncodeToString(wrong[:]), CABundleName: "image-ca"},
			})
			b.machineDeployment("odd", "odd", 1)
			b.template("raw", infrav1.RedfishMachineSpec{
				HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "fleet"}},
				Image:        &infrav1.Image{URL: rawURL, Format: infrav1.ImageFormatRaw, Checksum: rawSum, CABundleName: "image-ca"},
			})
			data, md := sample.MachineDeployment(b.ns, b.cluster.Name, "nodes", "raw", fleetHosts, 0, fleetHosts)
			Expect(env.Create(ctx, data)).To(Succeed())
			Expect(env.Create(ctx, md)).To(Succeed())
			start := time.Now()
			b.waitRunning("nodes", fleetHosts)
			GinkgoWriter.Printf("%d raw installs on %d profiles: %s\n", fleetHosts, len(mediaProfiles), time.Since(start).Round(time.Millisecond))
			By("the seed of each disk-installed node deleted once its Node joined: the OS on the drive keeps what it read")
			for _, m := range b.machines("nodes") {
				Eventually(func() error {
					return env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: seed.SecretName(m.Spec.InfrastructureRef.Name)}, &corev1.Secret{})
				}).Should(MatchError(ContainSubstring("not found")), m.Name)
			}

			By("reporting where the time of a provisioning goes: raw install vs the live-ISO control plane")
			reportPhases(b)

			checkInstalled := func(image []byte, sum string, installs int) {
				GinkgoHelper()
				hosts := map[string]infrav1.RedfishHost{}
				for _, h := range b.hosts() {
					hosts[h.Name] = h
				}
				for _, srv := range fleet {
					h := hosts[srv.ID()]
					Expect(h.Status.Install).NotTo(BeNil(), srv.ID())
					Expect(h.Status.Install.Phase).To(Equal(infrav1.InstallPhaseInstalled), srv.ID())
					Expect(h.Status.Install.Checksum).To(Equal(sum), srv.ID())
					Expect(h.Status.Install.Device).To(HavePrefix("Disk1 "), srv.ID())
					Expect(conditions.IsTrue(&h, infrav1.ImageInstalledCondition)).To(BeTrue(), srv.ID())
					written := readDrive(srv, "Disk1", 4<<20)
					Expect(bytes.Equal(written[:len(image)], image)).To(BeTrue(), "%s (%s): Disk1 does not hold the image", srv.ID(), srv.Profile().Name)
					Expect(zeros(written[len(image):])).To(BeTrue(), "%s: Disk1 holds more than the image: what an earlier tenant wrote was not erased", srv.ID())
					Expect(zeros(readDrive(srv, "Disk0", 4<<20))).To(BeTrue(), "%s (%s): Disk0 was written; only the hinted drive may be", srv.ID(), srv.Profile().Name)
					booted := b.os.Booted(srv.ID())
					Expect(booted[len(booted)-2:]).To(Equal([]string{simos.Deploy, simos.DiskImage + ":Disk1"}), "%s boots: %v", srv.ID(), booted)
					Expect(booted).NotTo(ContainElement(simos.NotBootable))
					Expect(b.os.Fetched()[srv.ID()]).To(HaveLen(installs), "%s: cloud-init runs once per install", srv.ID())
				}
			}
			By("each fleet host's Disk1 holding the raw image, Disk0 untouched, booted once into the deploy image and once from Disk1")
			checkInstalled(v1, rawSum, 1)
			Expect(diskImages.downloads("/" + b.ns + "/node-v1.raw")).To(Equal(fleetHosts))

			By("the odd host never claimed while no drive matches its hints")
			Consistently(func(g Gomega) {
				g.Expect(odd.Stats().Boots).To(BeZero())
				ms := b.machines("odd")
				g.Expect(ms).To(HaveLen(1))
				g.Expect(b.hostOf(ms[0])).To(BeEmpty())
			}, 2*time.Second).Should(Succeed())

			By("a remediation of a disk-installed node bringing the same Node back from its drive, without a new install")
			machine := b.machines("nodes")[0]
			srv := b.server(b.hostOf(machine))
			createRebootMHC(b, "nodes")
			markNodeNotReady(machine.Status.NodeRef.Name)
			Eventually(func(g Gomega) {
				err := env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: machine.Name}, &infrav1.RedfishRemediation{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "remediation still present: %v", err)
				node := &corev1.Node{}
				g.Expect(env.Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, node)).To(Succeed())
				g.Expect(node.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
				g.Expect(b.os.Booted(srv.ID())).To(Equal([]string{simos.Deploy, simos.DiskImage + ":Disk1", simos.DiskImage + ":Disk1"}))
			}, 2*time.Minute).Should(Succeed())
			Expect(env.Get(ctx, client.ObjectKeyFromObject(&machine), &machine)).To(Succeed())
			Expect(machine.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)))
			Expect(b.os.Fetched()[srv.ID()]).To(HaveLen(1), "the bootstrap data ran again: a new install, not a reboot")
			Expect(diskImages.downloads("/" + b.ns + "/node-v1.raw")).To(Equal(fleetHosts))
			Expect(env.Delete(ctx, &clusterv1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "nodes"}})).To(Succeed())

			By("a mismatching image, once a drive matches the odd host's hints, wiped and never booted")
			h := &infrav1.RedfishHost{}
			Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: odd.ID()}, h)).To(Succeed())
			h.Spec.RootDeviceHints = &infrav1.RootDeviceHints{DeviceName: "Disk0"}
			Expect(env.Update(ctx, h)).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
				c := conditions.Get(h, infrav1.ImageInstalledCondition)
				g.Expect(c).NotTo(BeNil(), b.dump)
				g.Expect(c.Reason).To(Equal(infrav1.ChecksumMismatchReason), b.dump)
				g.Expect(c.Message).To(And(ContainSubstring("node-v1.raw"), ContainSubstring(hex.EncodeToString(wrong[:]))))
				g.Expect(h.Status.Install.Phase).To(Equal(infrav1.InstallPhaseFailed))
				g.Expect(odd.PowerState()).To(Equal(simulator.PowerOff))
			}).Should(Succeed())
			Consistently(func(g Gomega) {
				g.Expect(b.os.Booted(odd.ID())).To(Equal([]string{simos.Deploy}), "the mismatching drive was booted")
				g.Expect(odd.PowerState()).To(Equal(simulator.PowerOff))
			}, 3*time.Second).Should(Succeed())
			Expect(zeros(readDrive(odd, "Disk0", 1<<20))).To(BeTrue(), "the written drive's start was not wiped: a firmware could boot it")
			Expect(b.machines("odd")[0].Status.NodeRef.IsDefined()).To(BeFalse())

			By("a self-installing ISO, on the odd host cleaned of the failed install, writing the drive the claim chose and the host then booting it")
			Expect(env.Delete(ctx, &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: "odd"}})).To(Succeed())
			v3 := simos.NodeImage("v3", 1<<20+3)
			isoURL, _ := diskImages.publish("/"+b.ns+"/installer-v3.iso", simos.InstallerISO(v3))
			b.template("iso", infrav1.RedfishMachineSpec{
				HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "odd"}},
				Image:        &infrav1.Image{URL: isoURL, Format: infrav1.ImageFormatISO},
			})
			b.machineDeployment("iso", "iso", 1)
			b.waitRunning("iso", 1)
			Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
			Expect(h.Status.Install.Phase).To(Equal(infrav1.InstallPhaseInstalled))
			Expect(b.os.Booted(odd.ID())).To(Equal([]string{simos.Deploy, simos.Installer, simos.DiskImage + ":Disk0"}))
			Expect(bytes.HasPrefix(readDrive(odd, "Disk0", 2<<20), v3)).To(BeTrue(), "the installer did not write Disk0")
			Expect(zeros(readDrive(odd, "Disk1", 2<<20))).To(BeTrue())
			Expect(odd.DriveErasures()["Disk0"]).To(Equal(1), "the failed install's drive was not cleaned before the next claim")

			By("a rollout to a qcow2 image: the hosts cleaned, then the converted image on Disk1")
			b.template("qcow2", infrav1.RedfishMachineSpec{
				HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "fleet"}},
				Image:        &infrav1.Image{URL: qcowURL, Checksum: qcowSum, CABundleName: "image-ca"},
			})
			old := map[string]bool{}
			for _, m := range b.machines("nodes") {
				old[m.Name] = true
			}
			switchTemplate(md, "qcow2")
			Eventually(func(g Gomega) {
				ms := b.machines("nodes")
				g.Expect(ms).To(HaveLen(fleetHosts))
				for _, m := range ms {
					g.Expect(old).NotTo(HaveKey(m.Name))
					g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), b.dump)
				}
				g.Expect(b.os.Errors()).To(BeEmpty())
			}, 3*time.Minute).Should(Succeed())
			for _, srv := range fleet {
				Expect(srv.DriveErasures()["Disk1"]).To(BeNumerically(">=", 1), "%s was not cleaned between tenants", srv.ID())
			}
			checkInstalled(v2, qcowSum, 2)
			Expect(diskImages.downloads("/" + b.ns + "/node-v2.qcow2")).To(Equal(fleetHosts))
		})

	It("refuses at admission an image whose format is unknown or contradicts its URL, and a disk image without a checksum", Label("bad-image-format"), func() {
		ns, err := env.CreateNamespace(ctx, "badimage")
		Expect(err).NotTo(HaveOccurred())
		sum := hex.EncodeToString(make([]byte, 32))
		for _, tc := range []struct {
			img  infrav1.Image
			want string
		}{
			{infrav1.Image{URL: "https://images.example/ubuntu-2404-kube.qcow2", Format: infrav1.ImageFormatRaw, Checksum: sum}, "the URL names a qcow2 image; a raw image would not boot"},
			{infrav1.Image{URL: "https://images.example/ubuntu-2404-kube.raw"}, "only once its checksum is verified"},
			{infrav1.Image{URL: "https://images.example/latest"}, "names no format"},
			{infrav1.Image{URL: "https://images.example/ubuntu.raw.gz", Checksum: sum}, "names no format"},
			{infrav1.Image{URL: "https://images.example/ubuntu.raw", Checksum: "abc"}, "is not a sha256 digest"},
			{infrav1.Image{URL: "https://images.example/ubuntu.iso", Format: infrav1.ImageFormatQCOW2, Checksum: sum}, "the URL names a live-iso image"},
		} {
			t := sample.MachineTemplate(ns.Name, "bad", infrav1.RedfishMachineSpec{Image: &tc.img})
			Expect(env.Create(ctx, t)).To(MatchError(ContainSubstring(tc.want)), "%+v", tc.img)
			rm := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "bad"}, Spec: infrav1.RedfishMachineSpec{Image: &tc.img}}
			Expect(env.Create(ctx, rm)).To(MatchError(ContainSubstring(tc.want)), "%+v", tc.img)
		}
		By("an unknown format refused by the schema")
		t := sample.MachineTemplate(ns.Name, "bad", infrav1.RedfishMachineSpec{Image: &infrav1.Image{URL: "https://images.example/x.vmdk", Format: "vmdk"}})
		Expect(env.Create(ctx, t)).To(MatchError(ContainSubstring(`Unsupported value: "vmdk"`)))
	})
})

// reportPhases prints, per provisioned host, the time from its claim to the boot into the deploy
// image, the install, the boot from the drive and the Node: figures for the closing note, read
// from the hosts' status and the Nodes, asserted nowhere.
func reportPhases(b *bed) {
	GinkgoHelper()
	var install, total []time.Duration
	for _, h := range b.hosts() {
		c := h.Status.Claim
		if c == nil || h.Status.BootIssuedAt == nil {
			continue
		}
		rm := &infrav1.RedfishMachine{}
		Expect(env.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: c.Consumer.Name}, rm)).To(Succeed())
		nodes := &corev1.NodeList{}
		Expect(env.List(ctx, nodes)).To(Succeed())
		var joined time.Time
		for _, n := range nodes.Items {
			if n.Spec.ProviderID == rm.Spec.ProviderID {
				joined = n.CreationTimestamp.Time
			}
		}
		if joined.IsZero() {
			continue
		}
		if in := h.Status.Install; in != nil && in.FinishedAt != nil {
			GinkgoWriter.Printf("  %-14s %-14s raw: claim→deploy boot %s, deploy image (boot, download, write, report, power-off) %s, →drive boot %s, →Node %s (total %s)\n",
				h.Name, h.Labels[profileLabel], in.BootIssuedAt.Sub(c.Since.Time).Round(time.Millisecond), in.FinishedAt.Sub(in.BootIssuedAt.Time).Round(time.Millisecond),
				h.Status.BootIssuedAt.Sub(in.FinishedAt.Time).Round(time.Millisecond), joined.Sub(h.Status.BootIssuedAt.Time).Round(time.Second), joined.Sub(c.Since.Time).Round(time.Second))
			install, total = append(install, in.FinishedAt.Sub(in.BootIssuedAt.Time)), append(total, joined.Sub(c.Since.Time))
			continue
		}
		GinkgoWriter.Printf("  %-14s %-14s live ISO: claim→boot %s, →Node %s (total %s)\n", h.Name, h.Labels[profileLabel],
			h.Status.BootIssuedAt.Sub(c.Since.Time).Round(time.Millisecond), joined.Sub(h.Status.BootIssuedAt.Time).Round(time.Second), joined.Sub(c.Since.Time).Round(time.Second))
	}
	slices.Sort(install)
	slices.Sort(total)
	if len(install) > 0 {
		GinkgoWriter.Printf("  raw installs: median deploy %s, median claim→Node %s (Node creation times have a resolution of 1 s)\n", install[len(install)/2].Round(time.Millisecond), total[len(total)/2].Round(time.Second))
	}
}
