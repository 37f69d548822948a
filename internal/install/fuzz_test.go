package install

import (
	"os/exec"
	"strings"
	"testing"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// Fuzz target: its seed corpus runs with every `go test`; `go test -fuzz=FuzzQuote
// ./internal/install` explores (see docs/fuzzing.md).

// Every value the deploy script carries (image and checksum URLs, the drive's serial number and
// WWN as the BMC reported them, CA bundles) is quoted so that bash reads back exactly that value:
// nothing in it is run.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{
		"https://images.example/os.raw", "it's", `$(reboot)`, "`id`", "a\nb", `\'`, "'''", "${HOME}", "!!", "x\x01y", "",
		"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "S3R14L; poweroff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			return // bash strings end at NUL; no API string carries one (see TestScriptRefusesNUL)
		}
		out, err := exec.CommandContext(t.Context(), "bash", "-c", "printf %s "+quote(s)).Output()
		if err != nil {
			t.Fatalf("bash could not read %q quoted as %s: %v", s, quote(s), err)
		}
		if string(out) != s {
			t.Fatalf("%q quoted as %s reads back in bash as %q", s, quote(s), out)
		}
	})
}

// A value with a NUL byte (a BMC may report one in a serial number; JSON and the API carry it)
// cannot be written into a bash script as it is: the script is refused, never cut short there.
func TestScriptRefusesNUL(t *testing.T) {
	p := Params{ImageURL: "https://images.example/os.raw", Format: "raw", Checksum: strings.Repeat("a", 64),
		Device: infrav1.RootDevice{SerialNumber: "S3R1\x00AL"}, ReportURL: "https://seed.example/r"}
	if _, err := Script(p); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("a serial number with a NUL byte gave a script (err %v)", err)
	}
	p.Device.SerialNumber, p.ImageURL = "S3R1AL", "https://images.example/\x00os.raw"
	if _, err := Script(p); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("an image URL with a NUL byte gave a script (err %v)", err)
	}
}
