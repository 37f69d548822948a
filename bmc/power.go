package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/stmcginnis/gofish/schemas"
)

// PowerState is the power state a BMC reports.
type PowerState string

// Power states.
const (
	PowerOn          PowerState = "On"
	PowerOff         PowerState = "Off"
	PowerPoweringOn  PowerState = "PoweringOn"
	PowerPoweringOff PowerState = "PoweringOff"
)

// ResetType is a Redfish ComputerSystem.Reset type.
type ResetType string

// Reset types the provider uses.
const (
	ResetOn               ResetType = "On"
	ResetForceOff         ResetType = "ForceOff"
	ResetGracefulShutdown ResetType = "GracefulShutdown"
	ResetGracefulRestart  ResetType = "GracefulRestart"
	ResetForceRestart     ResetType = "ForceRestart"
	ResetPowerCycle       ResetType = "PowerCycle"
)

func (c *client) PowerState(ctx context.Context) (PowerState, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return "", err
	}
	return PowerState(sys.PowerState), nil
}

func (c *client) Reset(ctx context.Context, t ResetType) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return err
	}
	if alreadyThere(PowerState(sys.PowerState), t) {
		return nil
	}
	return c.postReset(ctx, resetActionOf(sys), t)
}

// resetAction is a system's ComputerSystem.Reset action: its target and the reset types it lists
// in ResetType@Redfish.AllowableValues (none listed: any may be tried).
type resetAction struct {
	target  string
	allowed []ResetType
}

func resetActionOf(sys *schemas.ComputerSystem) resetAction {
	var res struct {
		Actions struct {
			Reset struct {
				Allowed []ResetType `json:"ResetType@Redfish.AllowableValues"`
			} `json:"#ComputerSystem.Reset"`
		}
	}
	_ = json.Unmarshal(sys.RawData, &res)
	return resetAction{target: actionTarget(sys.RawData, "#ComputerSystem.Reset", sys.ODataID), allowed: res.Actions.Reset.Allowed}
}

// postReset sends t, unless t is GracefulShutdown and the action's allowable values leave it out:
// then nothing is sent and the error wraps ErrNotSupported (the caller forces off instead).
func (c *client) postReset(ctx context.Context, a resetAction, t ResetType) error {
	// Only GracefulShutdown is held to the list: BMCs list incomplete values (ForceOn without
	// On), and a power-on or power-off that is tried still has a chance.
	if t == ResetGracefulShutdown && len(a.allowed) > 0 && !slices.Contains(a.allowed, t) {
		return fmt.Errorf("%s reset of %s: %w: the BMC allows %v", t, c.systemPath, ErrNotSupported, a.allowed)
	}
	if err := c.send(ctx, http.MethodPost, a.target, map[string]any{"ResetType": t}); err != nil {
		return fmt.Errorf("%s reset of %s: %w", t, c.systemPath, err)
	}
	return nil
}

// ResetFrom sends t to a system whose power state the caller has just read (observed): the system
// is not read again when an earlier read gave its reset target. The same rules as Reset apply: t
// is not sent when observed says the system is already there or on its way.
func (c *client) ResetFrom(ctx context.Context, t ResetType, observed PowerState) error {
	target := c.resetAction.Load()
	if target == nil {
		return c.Reset(ctx, t)
	}
	if alreadyThere(observed, t) {
		return nil
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	return c.postReset(ctx, *target, t)
}

// alreadyThere says whether sending t would repeat a transition the system already made or is
// making. Restarts always go through: they are requested to happen again.
func alreadyThere(s PowerState, t ResetType) bool {
	switch t {
	case ResetOn:
		return s == PowerOn || s == PowerPoweringOn
	case ResetForceOff, ResetGracefulShutdown:
		return s == PowerOff || s == PowerPoweringOff
	}
	return false
}
