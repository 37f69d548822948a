package bmc

import (
	"context"
	"fmt"

	"github.com/stmcginnis/gofish/schemas"
)

// BootTarget is a one-time boot source.
type BootTarget string

// Boot targets.
const (
	BootNone      BootTarget = "None"
	BootPxe       BootTarget = "Pxe"
	BootUefiHTTP  BootTarget = "UefiHttp"
	BootCd        BootTarget = "Cd"
	BootHdd       BootTarget = "Hdd"
	BootBiosSetup BootTarget = "BiosSetup"
)

// BootOverride is a boot source override.
type BootOverride struct {
	Target BootTarget
	// Legacy boots in legacy BIOS mode instead of UEFI.
	Legacy bool
	// HTTPBootURI is the image URI for BootUefiHTTP.
	HTTPBootURI string
	// Continuous keeps the override for every boot instead of the next one only.
	Continuous bool
}

func (c *client) SetBootOverride(ctx context.Context, o BootOverride) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return err
	}
	b := &schemas.Boot{
		BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled,
		BootSourceOverrideTarget:  schemas.BootSource(o.Target),
		BootSourceOverrideMode:    schemas.UEFIBootSourceOverrideMode,
		HTTPBootURI:               o.HTTPBootURI,
	}
	if o.Continuous {
		b.BootSourceOverrideEnabled = schemas.ContinuousBootSourceOverrideEnabled
	}
	if o.Legacy {
		b.BootSourceOverrideMode = schemas.LegacyBootSourceOverrideMode
	}
	if o.Target == BootNone {
		b.BootSourceOverrideEnabled = schemas.DisabledBootSourceOverrideEnabled
	}
	if err := sys.SetBoot(b); err != nil {
		return fmt.Errorf("setting boot override %s: %w", o.Target, classify(err))
	}
	return nil
}
