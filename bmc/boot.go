package bmc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

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

// SetBootOverride sets the override with one PATCH shaped by what the system declares: the target
// must be among its BootSourceOverrideTarget@Redfish.AllowableValues (when it lists them), the
// mode is sent only to a system that has BootSourceOverrideMode, and a URI left by an earlier UEFI
// HTTP boot is cleared.
func (c *client) SetBootOverride(ctx context.Context, o BootOverride) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.recentSystem(ctx, bootReadMaxAge)
	if err != nil {
		return err
	}
	// Changed, or maybe changed, by what follows: a read made before or during it is not used.
	c.changes.Add(1)
	defer c.changes.Add(1)
	cur := sys.Boot
	if allowed := cur.AllowableBootSourceOverrideTargetValues; len(allowed) > 0 && !slices.Contains(allowed, schemas.BootSource(o.Target)) {
		return fmt.Errorf("%w: boot target %s (system %s allows %v)", ErrNotSupported, o.Target, c.systemPath, allowed)
	}
	boot := map[string]any{
		"BootSourceOverrideEnabled": schemas.OnceBootSourceOverrideEnabled,
		"BootSourceOverrideTarget":  o.Target,
	}
	if o.Continuous {
		boot["BootSourceOverrideEnabled"] = schemas.ContinuousBootSourceOverrideEnabled
	}
	if o.Target == BootNone {
		boot["BootSourceOverrideEnabled"] = schemas.DisabledBootSourceOverrideEnabled
	}
	if cur.BootSourceOverrideMode != "" {
		mode := schemas.UEFIBootSourceOverrideMode
		if o.Legacy {
			mode = schemas.LegacyBootSourceOverrideMode
		}
		boot["BootSourceOverrideMode"] = mode
	} else if o.Legacy {
		return fmt.Errorf("%w: legacy boot mode (system %s has no BootSourceOverrideMode)", ErrNotSupported, c.systemPath)
	}
	if o.Target == BootUefiHTTP {
		boot["HttpBootUri"] = o.HTTPBootURI
	}
	if err := c.patchBoot(ctx, sys, boot); err != nil {
		return fmt.Errorf("setting boot override %s: %w", o.Target, err)
	}
	if o.Target != BootUefiHTTP && cur.HTTPBootURI != "" {
		// A URI left by an earlier UEFI HTTP boot, cleared on its own (best effort), with the
		// whole override again (Supermicro refuses a Boot PATCH without Enabled and Target); a
		// BMC that refuses null takes "".
		if fresh, err := c.system(ctx); err == nil {
			sys = fresh // the override PATCH changed its ETag
		}
		clear := maps.Clone(boot)
		clear["HttpBootUri"] = nil
		if err := c.patchBoot(ctx, sys, clear); err != nil {
			clear["HttpBootUri"] = ""
			_ = c.patchBoot(ctx, sys, clear)
		}
	}
	return nil
}

// patchBoot PATCHes the system's Boot; where Boot is read-only on the system itself (iDRAC 10),
// its settings object takes it (not when the BMC is only busy, e.g. in POST: that is retried).
func (c *client) patchBoot(ctx context.Context, sys *schemas.ComputerSystem, boot map[string]any) error {
	err := c.patch(ctx, sys.ODataID, sys.ODataEtag, map[string]any{"Boot": boot})
	settings := settingsObject(sys.RawData)
	if err == nil || settings == "" || errors.Is(err, ErrConflict) ||
		statusOf(err) != http.StatusBadRequest && statusOf(err) != http.StatusMethodNotAllowed {
		return err
	}
	etag, err := c.etag(ctx, settings)
	if err != nil {
		return fmt.Errorf("reading the system's settings object %s: %w", settings, err)
	}
	return c.patch(ctx, settings, etag, map[string]any{"Boot": boot})
}
