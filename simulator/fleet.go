package simulator

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// FleetOptions describe a fleet of identical simulated servers.
type FleetOptions struct {
	// Servers is how many servers to start.
	Servers int
	// NamePrefix names servers <prefix>-<n> (default "server").
	NamePrefix string
	// Fleet numbers this fleet: MACs and UUIDs of fleets with different numbers never collide
	// (default 0). Give every fleet registered in one namespace its own number and prefix.
	Fleet uint16
	// Username and Password every BMC accepts (default admin / password).
	Username, Password string
	// PowerLatency, POSTDuration, TaskDuration, EraseDuration, NoSecureErase, TLS and PoweredOn as
	// in Config.
	PowerLatency  time.Duration
	POSTDuration  time.Duration
	TaskDuration  time.Duration
	EraseDuration time.Duration
	NoSecureErase bool
	// NoSecureEraseDrives, EmptyBays and EraseWithoutMonitor as in Config.
	NoSecureEraseDrives []string
	EmptyBays           int
	EraseWithoutMonitor bool
	// ShutdownDuration as in Config.
	ShutdownDuration time.Duration
	// IPXEChainURL, FirmwareRootCAs and SingleMediaSlot as in Config.
	IPXEChainURL    string
	FirmwareRootCAs *x509.CertPool
	SingleMediaSlot bool
	TLS             bool
	PoweredOn       bool
	// Profiles are given to the servers in turn (a mixed fleet); empty: the default profile.
	Profiles []Profile
}

// Fleet is a set of simulated servers.
type Fleet struct {
	Servers []*Server
}

// StartFleet starts opts.Servers servers, each on its own loopback port.
func StartFleet(opts FleetOptions) (*Fleet, error) {
	if opts.Servers < 1 {
		return nil, errors.New("simulator: a fleet needs at least one server")
	}
	if opts.NamePrefix == "" {
		opts.NamePrefix = "server"
	}
	f := &Fleet{}
	for i := 0; i < opts.Servers; i++ {
		var profile Profile
		if len(opts.Profiles) > 0 {
			profile = opts.Profiles[i%len(opts.Profiles)]
		}
		s, err := New(Config{
			Profile: profile,
			ID:      fmt.Sprintf("%s-%d", opts.NamePrefix, i), Index: i, Fleet: opts.Fleet, Username: opts.Username, Password: opts.Password,
			PowerLatency: opts.PowerLatency, POSTDuration: opts.POSTDuration, TaskDuration: opts.TaskDuration, EraseDuration: opts.EraseDuration, NoSecureErase: opts.NoSecureErase,
			NoSecureEraseDrives: opts.NoSecureEraseDrives, EmptyBays: opts.EmptyBays, EraseWithoutMonitor: opts.EraseWithoutMonitor,
			ShutdownDuration: opts.ShutdownDuration,
			IPXEChainURL:     opts.IPXEChainURL, FirmwareRootCAs: opts.FirmwareRootCAs, SingleMediaSlot: opts.SingleMediaSlot,
			TLS: opts.TLS, PoweredOn: opts.PoweredOn,
		})
		if err != nil {
			f.Close()
			return nil, err
		}
		f.Servers = append(f.Servers, s)
	}
	return f, nil
}

// Close stops every server.
func (f *Fleet) Close() {
	for _, s := range f.Servers {
		s.Close()
	}
}

// OnBoot registers one observer on every server.
func (f *Fleet) OnBoot(fn func(BootEvent)) {
	for _, s := range f.Servers {
		s.OnBoot(fn)
	}
}
