package seed

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// CIDataLabel is the volume label cloud-init's NoCloud datasource looks for on attached media.
const CIDataLabel = "cidata"

// CIDataISO builds a NoCloud seed volume: ISO 9660 with Rock Ridge and Joliet names (so
// "meta-data" keeps its name on every OS) and the volume label cidata, holding files.
func CIDataISO(files map[string][]byte) ([]byte, error) {
	dir, err := os.MkdirTemp("", "caprf-cidata-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	workspace := filepath.Join(dir, "workspace")
	if err := os.Mkdir(workspace, 0o700); err != nil {
		return nil, err
	}
	size := int64(1 << 20) // the volume descriptors and directories fit well within 1 MiB
	for _, data := range files {
		size += int64(len(data)) + 2048
	}
	path := filepath.Join(dir, "cidata.iso")
	storage, err := file.CreateFromPath(path, size)
	if err != nil {
		return nil, err
	}
	fs, err := iso9660.Create(storage, 0, 0, 2048, workspace)
	if err != nil {
		return nil, fmt.Errorf("creating the seed volume: %w", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, err := fs.OpenFile(name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("adding %s to the seed volume: %w", name, err)
		}
		_, werr := f.Write(files[name])
		if err := errors.Join(werr, f.Close()); err != nil {
			return nil, fmt.Errorf("adding %s to the seed volume: %w", name, err)
		}
	}
	if err := fs.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: CIDataLabel}); err != nil {
		return nil, fmt.Errorf("writing the seed volume: %w", err)
	}
	return os.ReadFile(path)
}

// ReadVolume reads an ISO 9660 volume, as an OS mounting an attached medium does: its label and
// the files of its root folder.
func ReadVolume(image []byte) (string, map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "caprf-volume-")
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "volume.iso")
	if err := os.WriteFile(path, image, 0o600); err != nil {
		return "", nil, err
	}
	storage, err := file.OpenFromPath(path, true)
	if err != nil {
		return "", nil, err
	}
	fs, err := iso9660.Read(storage, 0, 0, 2048)
	if err != nil {
		return "", nil, fmt.Errorf("not an ISO 9660 volume: %w", err)
	}
	entries, err := fs.ReadDir(".")
	if err != nil {
		return "", nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		f, err := fs.OpenFile(e.Name(), os.O_RDONLY)
		if err != nil {
			return "", nil, err
		}
		data, err := io.ReadAll(f)
		_ = f.Close()
		if err != nil {
			return "", nil, err
		}
		files[e.Name()] = data
	}
	// Volume identifiers are padded (with spaces, or NULs in a Joliet descriptor).
	label := strings.TrimRightFunc(fs.Label(), func(r rune) bool { return r == ' ' || r == 0 || !unicode.IsPrint(r) })
	return label, files, nil
}

// networkConfig is a NoCloud network-config (version 2): DHCP on the boot NIC, matched by MAC;
// without a known MAC, cloud-init's own fallback (DHCP on the first NIC with a link) applies.
func networkConfig(mac string) []byte {
	if mac == "" {
		return []byte("version: 2\n")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "version: 2\nethernets:\n  boot:\n    match:\n      macaddress: %q\n    dhcp4: true\n", strings.ToLower(mac))
	return b.Bytes()
}
