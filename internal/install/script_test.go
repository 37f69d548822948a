package install_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simdisk"
	"github.com/caprf/cluster-api-provider-redfish/internal/install"
)

const diskSize = 16 << 20

// bench is an HTTPS image server with a test CA, a report endpoint, and a server with two
// file-backed drives.
type bench struct {
	t       *testing.T
	srv     *httptest.Server // images and checksum files
	reports *httptest.Server // the seed server's report endpoint: a certificate of its own
	ca      []byte
	seedCA  []byte
	opts    simdisk.Options
	refuse  int // report requests answered 503 before one is taken
	raw     []byte
	files   map[string][]byte
	mu      sync.Mutex
	got     [][]byte
	drives  []simdisk.Drive
}

func newBench(t *testing.T) *bench {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Fatal("qemu-img is needed (Debian: apt-get install qemu-utils); .ci/run installs it")
	}
	b := &bench{t: t, files: map[string][]byte{}}
	// A disk image: random bytes, not a multiple of the block size dd writes.
	b.raw = make([]byte, 5<<20+1234)
	_, _ = rand.Read(b.raw)
	dir := t.TempDir()
	rawPath, qcowPath := filepath.Join(dir, "node.raw"), filepath.Join(dir, "node.qcow2")
	if err := os.WriteFile(rawPath, b.raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v: %s", err, out)
	}
	qcow, err := os.ReadFile(qcowPath)
	if err != nil {
		t.Fatal(err)
	}
	b.files["/node.raw"], b.files["/node.qcow2"] = b.raw, qcow
	b.files["/SHA256SUMS"] = []byte(sum256(qcow) + "  other.raw\n" + sum256(b.raw) + " *node.raw\n")
	b.files["/CHECKSUM"] = []byte("SHA256 (other.raw) = " + sum256(qcow) + "\r\nSHA256 (node.raw) = " + sum256(b.raw) + "\r\n")
	b.reports = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/report" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.refuse > 0 { // the seed server restarting
			b.refuse--
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		b.got = append(b.got, body)
	}))
	t.Cleanup(b.reports.Close)
	b.seedCA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.reports.Certificate().Raw})
	b.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := b.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(b.srv.Close)
	b.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.srv.Certificate().Raw})
	for i, serial := range []string{"S4SIM-0", "S4SIM-1"} {
		path := filepath.Join(dir, "disk"+string(rune('0'+i)))
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, diskSize); err != nil {
			t.Fatal(err)
		}
		b.drives = append(b.drives, simdisk.Drive{Path: path, Serial: serial, WWN: "5002538e0000000" + string(rune('a'+i))})
	}
	return b
}

func sum256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func (b *bench) params(image string, format infrav1.ImageFormat, checksum string) install.Params {
	return install.Params{
		ImageURL: b.srv.URL + image, Format: format, Checksum: checksum, ChecksumType: infrav1.ChecksumSHA256,
		Device:    infrav1.RootDevice{Name: "Disk1", SerialNumber: "S4SIM-1"},
		ReportURL: b.reports.URL + "/report", CABundle: b.ca, ReportCABundle: b.seedCA, ReportWindow: 4 * time.Second, ReportDelay: time.Second,
	}
}

// run runs the script of p and returns the report it sent and what the drives hold.
func (b *bench) run(p install.Params) (install.Report, simdisk.Result, [][]byte) {
	b.t.Helper()
	script, err := install.Script(p)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, _ := simdisk.RunWith(ctx, script, b.drives, b.opts)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) != 1 {
		b.t.Fatalf("reports sent: %d, want 1; console:\n%s", len(b.got), res.Output)
	}
	rep, err := install.ParseReport(b.got[0])
	if err != nil {
		b.t.Fatal(err)
	}
	b.got = nil
	var disks [][]byte
	for _, d := range b.drives {
		data, err := os.ReadFile(d.Path)
		if err != nil {
			b.t.Fatal(err)
		}
		if len(data) != diskSize {
			b.t.Fatalf("%s is %d bytes after the script, want %d (a write must not resize the drive)", d.Path, len(data), diskSize)
		}
		disks = append(disks, data)
	}
	return rep, res, disks
}

func zero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

func TestTheDeployScriptWritesTheImageToTheHintedDriveOnly(t *testing.T) {
	b := newBench(t)
	for _, tc := range []struct {
		name, image string
		format      infrav1.ImageFormat
		checksum    string
		sha512      bool
	}{
		{name: "raw with a sha256 digest", image: "/node.raw", format: infrav1.ImageFormatRaw, checksum: sum256(b.raw)},
		{name: "qcow2, converted by qemu-img", image: "/node.qcow2", format: infrav1.ImageFormatQCOW2, checksum: sum256(b.files["/node.qcow2"])},
		{name: "raw with a checksum file", image: "/node.raw", format: infrav1.ImageFormatRaw, checksum: b.srv.URL + "/SHA256SUMS"},
		{name: "raw with a BSD-style checksum file, CRLF", image: "/node.raw", format: infrav1.ImageFormatRaw, checksum: b.srv.URL + "/CHECKSUM"},
		{name: "raw with a sha512 digest", image: "/node.raw", format: infrav1.ImageFormatRaw, sha512: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range b.drives {
				if err := os.Truncate(d.Path, 0); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(d.Path, diskSize); err != nil {
					t.Fatal(err)
				}
			}
			p := b.params(tc.image, tc.format, tc.checksum)
			if tc.sha512 {
				s := sha512.Sum512(b.raw)
				p.Checksum, p.ChecksumType = hex.EncodeToString(s[:]), infrav1.ChecksumSHA512
			}
			rep, res, disks := b.run(p)
			if !rep.OK || !res.PoweredOff {
				t.Fatalf("report %+v, powered off %t; console:\n%s", rep, res.PoweredOff, res.Output)
			}
			if !bytes.Equal(disks[1][:len(b.raw)], b.raw) || !zero(disks[1][len(b.raw):]) {
				t.Errorf("Disk1 does not hold the image followed by what was there (zeros)")
			}
			if !zero(disks[0]) {
				t.Errorf("Disk0 was written: only the hinted drive may be")
			}
			if rep.SizeBytes != int64(len(b.files[tc.image])) || rep.Checksum != p.Checksum && !install.IsChecksumURL(p.Checksum) {
				t.Errorf("report says %d bytes, checksum %s; want %d, %s", rep.SizeBytes, rep.Checksum, len(b.files[tc.image]), p.Checksum)
			}
			if rep.Device != disks0Label(b, 1) {
				t.Errorf("report names device %q, want %q", rep.Device, disks0Label(b, 1))
			}
		})
	}
}

func disks0Label(b *bench, i int) string {
	return b.drives[i].Path + " (serial " + b.drives[i].Serial + ")"
}

func TestAMismatchingImageIsWipedAndReportedNeverLeftToBoot(t *testing.T) {
	b := newBench(t)
	wrong := sum256([]byte("another image"))
	rep, res, disks := b.run(b.params("/node.raw", infrav1.ImageFormatRaw, wrong))
	if rep.OK || rep.Reason != infrav1.ChecksumMismatchReason || !res.PoweredOff {
		t.Fatalf("report %+v, powered off %t: want a ChecksumMismatch report and a power-off; console:\n%s", rep, res.PoweredOff, res.Output)
	}
	if rep.Checksum != sum256(b.raw) {
		t.Errorf("the mismatch report carries checksum %q, want the digest computed, %s", rep.Checksum, sum256(b.raw))
	}
	if !zero(disks[1][:1<<20]) {
		t.Errorf("the first MiB of the written drive still holds image bytes: a firmware could boot it")
	}
	t.Logf("report: %+v", rep)
}

func TestTheDriveIsFoundByWWNBeforeSerialAndNeverGuessed(t *testing.T) {
	b := newBench(t)
	// An NVMe drive: lsblk prints its WWN as eui.<hex>; the BMC's Identifiers gave the hex.
	b.drives[0].WWN = "eui.0025388b91b2c1a4"
	p0 := b.params("/node.raw", infrav1.ImageFormatRaw, sum256(b.raw))
	p0.Device = infrav1.RootDevice{SerialNumber: "S4SIM-1", WWN: "0025388B91B2C1A4"}
	if rep, _, disks := b.run(p0); !rep.OK || !bytes.Equal(disks[0][:len(b.raw)], b.raw) || !zero(disks[1]) {
		t.Errorf("report %+v: want the NVMe drive (Disk0) found by its eui. WWN", rep)
	}
	// A WWN the OS shows otherwise (an NGUID, a SAS port address): found by its serial number.
	b.blank()
	p0.Device = infrav1.RootDevice{SerialNumber: "S4SIM-1", WWN: "5000c500a1b2c3d4"}
	if rep, _, disks := b.run(p0); !rep.OK || !bytes.Equal(disks[1][:len(b.raw)], b.raw) || !zero(disks[0]) {
		t.Errorf("report %+v: want Disk1 found by its serial when no drive shows the WWN", rep)
	}
	b.blank()
	b.drives[0].WWN = "5002538e0000000a"
	p := b.params("/node.raw", infrav1.ImageFormatRaw, sum256(b.raw))
	p.Device = infrav1.RootDevice{SerialNumber: "S4SIM-1", WWN: "0x" + b.drives[0].WWN} // the WWN names Disk0
	rep, _, disks := b.run(p)
	if !rep.OK || !bytes.Equal(disks[0][:len(b.raw)], b.raw) || !zero(disks[1]) {
		t.Errorf("report %+v: want Disk0 (by WWN) written and Disk1 untouched", rep)
	}
	p.Device = infrav1.RootDevice{SerialNumber: "NO-SUCH-DRIVE"}
	for _, d := range b.drives {
		_ = os.Truncate(d.Path, 0)
		_ = os.Truncate(d.Path, diskSize)
	}
	rep, res, disks := b.run(p)
	if rep.OK || rep.Reason != infrav1.InstallFailedReason || !res.PoweredOff || !zero(disks[0]) || !zero(disks[1]) {
		t.Errorf("report %+v: want InstallFailed, no drive written, a power-off", rep)
	}
	t.Logf("report: %+v", rep)

	// Two drives answering to one serial number (a multipath pair, a vendor's placeholder): none
	// is guessed.
	b.drives[1].Serial = b.drives[0].Serial
	p.Device = infrav1.RootDevice{SerialNumber: b.drives[0].Serial}
	rep, _, disks = b.run(p)
	if rep.OK || !strings.Contains(rep.Message, "2 drives with serial") || !zero(disks[0]) || !zero(disks[1]) {
		t.Errorf("report %+v: want InstallFailed naming 2 drives, none written", rep)
	}
}

func (b *bench) blank() {
	b.t.Helper()
	for _, d := range b.drives {
		if err := os.Truncate(d.Path, 0); err != nil {
			b.t.Fatal(err)
		}
		if err := os.Truncate(d.Path, diskSize); err != nil {
			b.t.Fatal(err)
		}
	}
}

func TestAFileNotInTheGivenFormatIsRefusedBeforeAnythingIsWritten(t *testing.T) {
	b := newBench(t)
	gz := append([]byte{0x1f, 0x8b, 8, 0}, b.raw[:4096]...)
	b.files["/node.raw.gz.img"] = gz
	dir := t.TempDir()
	base, backed := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "backed.qcow2")
	for _, args := range [][]string{{"create", "-f", "qcow2", base, "8M"}, {"create", "-f", "qcow2", "-b", base, "-F", "qcow2", backed}} {
		if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
	}
	withBacking, err := os.ReadFile(backed)
	if err != nil {
		t.Fatal(err)
	}
	b.files["/backed.qcow2"] = withBacking
	for _, tc := range []struct {
		name, image string
		format      infrav1.ImageFormat
		data        []byte
		message     string
	}{
		{"a qcow2 file said raw (a distribution's .img)", "/node.qcow2", infrav1.ImageFormatRaw, b.files["/node.qcow2"], "is a qcow2 file, not a raw disk image"},
		{"a gzip file said raw", "/node.raw.gz.img", infrav1.ImageFormatRaw, gz, "is a gzip file"},
		{"a raw file said qcow2", "/node.raw", infrav1.ImageFormatQCOW2, b.raw, "is not a qcow2 image"},
		{"a qcow2 naming a backing file", "/backed.qcow2", infrav1.ImageFormatQCOW2, withBacking, "names a backing or data file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.blank()
			rep, res, disks := b.run(b.params(tc.image, tc.format, sum256(tc.data)))
			if rep.OK || rep.Reason != infrav1.ImageFormatMismatchReason || !strings.Contains(rep.Message, tc.message) || !res.PoweredOff {
				t.Errorf("report %+v, powered off %t: want ImageFormatMismatch saying %q; console:\n%s", rep, res.PoweredOff, tc.message, res.Output)
			}
			if !zero(disks[0]) || !zero(disks[1]) {
				t.Errorf("a drive was written")
			}
		})
	}
}

func TestAPoweroffThatFailsAfterAGoodReportLeavesTheDriveWritten(t *testing.T) {
	b := newBench(t)
	b.opts.PoweroffExit = 1
	rep, res, disks := b.run(b.params("/node.raw", infrav1.ImageFormatRaw, sum256(b.raw)))
	if !rep.OK || res.PoweredOff {
		t.Fatalf("report %+v, powered off %t; console:\n%s", rep, res.PoweredOff, res.Output)
	}
	if !bytes.Equal(disks[1][:len(b.raw)], b.raw) {
		t.Errorf("the verified drive was wiped after its report: the provider would boot a blank drive")
	}
}

func TestAReportRefusedWhileTheSeedServerRestartsIsSentAgain(t *testing.T) {
	b := newBench(t)
	b.refuse = 2
	rep, res, disks := b.run(b.params("/node.raw", infrav1.ImageFormatRaw, sum256(b.raw)))
	if !rep.OK || !res.PoweredOff || !bytes.Equal(disks[1][:len(b.raw)], b.raw) {
		t.Errorf("report %+v, powered off %t: want the report through on its third attempt, the drive written", rep, res.PoweredOff)
	}
}

func TestAFailedDownloadIsReportedAsSuchNotAsTheWrongFormat(t *testing.T) {
	b := newBench(t)
	for _, format := range []infrav1.ImageFormat{infrav1.ImageFormatRaw, infrav1.ImageFormatQCOW2} {
		rep, res, _ := b.run(b.params("/no-such-image", format, sum256(b.raw)))
		if rep.OK || rep.Reason != infrav1.InstallFailedReason || !strings.Contains(rep.Message, "exit status 22") || !res.PoweredOff {
			t.Errorf("%s: report %+v: want InstallFailed with curl's exit status 22 (HTTP 404); console:\n%s", format, rep, res.Output)
		}
	}
}
