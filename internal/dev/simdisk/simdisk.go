// Package simdisk runs a script as a simulated server's OS would: with bash and the real tools of
// this machine (curl, dd, qemu-img, sha256sum), against drives that are files. Only what the
// hardware decides is simulated: lsblk lists the server's drives (a file each, with the serial
// number and WWN the BMC reports) and poweroff tells the server to power off. lsblk answers only
// the one invocation it knows and fails on any other, so a script that asks the hardware
// something else fails here as its output would differ on a real server.
package simdisk

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Drive is a drive of the simulated server: a file holding its bytes.
type Drive struct {
	Path, Serial, WWN string
}

// LsblkArgs is the one lsblk invocation the simulated hardware answers.
const LsblkArgs = "--nodeps --noheadings --bytes --paths --pairs --output NAME,TYPE,SERIAL,WWN"

// Result is how a script run ended.
type Result struct {
	// PoweredOff is true when the script called poweroff.
	PoweredOff bool
	// Output is what it wrote to stdout and stderr (a console).
	Output string
}

// Options change how the simulated hardware answers.
type Options struct {
	// PoweroffExit is the exit status of poweroff (0: it worked; a real poweroff that fails
	// returns non-zero and the machine stays on).
	PoweroffExit int
}

// Run runs script with bash on a server with drives. The error is bash's (a non-zero exit).
func Run(ctx context.Context, script []byte, drives []Drive) (Result, error) {
	return RunWith(ctx, script, drives, Options{})
}

// RunWith is Run with options.
func RunWith(ctx context.Context, script []byte, drives []Drive, o Options) (Result, error) {
	dir, err := os.MkdirTemp("", "simdisk-")
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		return Result{}, err
	}
	var list strings.Builder
	for _, d := range drives {
		// As lsblk prints them: SATA and SAS 0x<NAA>, NVMe eui.<EUI-64 or NGUID> (given as such).
		wwn := d.WWN
		if wwn != "" && !strings.Contains(wwn, ".") {
			wwn = "0x" + strings.TrimPrefix(strings.ToLower(wwn), "0x")
		}
		fmt.Fprintf(&list, "NAME=\"%s\" TYPE=\"disk\" SERIAL=\"%s\" WWN=\"%s\"\n", d.Path, escape(d.Serial), wwn)
	}
	off := filepath.Join(dir, "powered-off")
	stubs := map[string]string{
		"lsblk":    "#!/bin/bash\nif [ \"$*\" != '" + LsblkArgs + "' ]; then echo \"lsblk: the simulated hardware answers only: lsblk " + LsblkArgs + "\" >&2; exit 64; fi\ncat <<'LSBLK'\n" + list.String() + "LSBLK\n",
		"poweroff": fmt.Sprintf("#!/bin/sh\n[ %d = 0 ] && touch '%s'\nexit %d\n", o.PoweroffExit, off, o.PoweroffExit),
	}
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil { //nolint:gosec // executables
			return Result{}, err
		}
	}
	path := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(path, script, 0o600); err != nil {
		return Result{}, err
	}
	cmd := exec.CommandContext(ctx, "bash", path) //nolint:gosec // the script under test
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir, "LANG=C"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	_, statErr := os.Stat(off)
	return Result{PoweredOff: statErr == nil, Output: out.String()}, runErr
}

// escape is a value as lsblk --pairs prints it: unsafe characters as \xHH.
func escape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c <= ' ' || c == '"' || c == '\\' || c == '`' || c == '$' || c >= 0x7f {
			fmt.Fprintf(&b, "\\x%02x", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
