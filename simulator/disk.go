package simulator

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Drive is a drive of a server as its OS sees it: the file holding its bytes and the identity
// the BMC reports for it.
type Drive struct {
	ID, Serial, WWN string
	// Path is a sparse file of the drive's capacity: what was written to the drive.
	Path string
}

// Drives returns the server's present drives, creating the files that hold their bytes on first
// use (under a folder of the server's, removed by Close).
func (s *Server) Drives() ([]Drive, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Drive
	for _, d := range s.state.drives {
		if d.absent {
			continue
		}
		if err := s.drivePath(d); err != nil {
			return nil, err
		}
		out = append(out, Drive{ID: d.id, Serial: d.serial, WWN: d.wwn, Path: d.path})
	}
	return out, nil
}

// drivePath creates d's file when it has none. Caller holds s.mu.
func (s *Server) drivePath(d *drive) error {
	if d.path != "" {
		return nil
	}
	if s.diskDir == "" {
		dir, err := os.MkdirTemp("", "caprf-sim-"+s.cfg.ID+"-")
		if err != nil {
			return err
		}
		s.diskDir = dir
	}
	path := filepath.Join(s.diskDir, d.id)
	f, err := os.Create(path) //nolint:gosec // a path of our own
	if err != nil {
		return err
	}
	if err := f.Truncate(d.capacity); err != nil {
		_ = f.Close()
		return fmt.Errorf("drive %s: %w", d.id, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	d.path = path
	return nil
}

// zeroDrive makes d read as zeros, as a completed secure erase leaves it. Caller holds s.mu.
func (s *Server) zeroDrive(d *drive) {
	if d.path == "" {
		return // never written
	}
	_ = os.Truncate(d.path, 0)
	_ = os.Truncate(d.path, d.capacity)
}

// removeDrives deletes the drives' files. Caller holds s.mu.
func (s *Server) removeDrives() {
	if s.diskDir != "" {
		_ = os.RemoveAll(s.diskDir)
		s.diskDir = ""
		for _, d := range s.state.drives {
			d.path = ""
		}
	}
}

// PowerOffFromOS is the OS powering the server off (poweroff, ACPI soft-off): the power goes Off
// after the server's power latency. Nothing happens when it is off already.
func (s *Server) PowerOffFromOS() {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.state
	if st.power != PowerOn {
		return
	}
	st.power = PowerPoweringOff
	st.postUntil = time.Time{}
	s.after(s.cfg.PowerLatency, func() {
		st.power, st.offSince, st.bootProgress, st.bootProgressAt = PowerOff, time.Now(), "None", time.Now()
	})
}
