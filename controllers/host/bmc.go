package host

import (
	"context"
	"time"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
)

// BMC is what the host controller asks of a server's BMC: power, boot, media, erase, inventory.
type BMC interface {
	PowerState(ctx context.Context) (bmc.PowerState, error)
	Reset(ctx context.Context, t bmc.ResetType) error
	ResetFrom(ctx context.Context, t bmc.ResetType, observed bmc.PowerState) error
	Inventory(ctx context.Context) (*infrav1.Inventory, error)
	SetBootOverride(ctx context.Context, o bmc.BootOverride) error
	InsertMedia(ctx context.Context, image, seed string) error
	EjectMedia(ctx context.Context, match string) error
	EraseDrives(ctx context.Context, exempt, expected []string) ([]bmc.EraseJob, error)
	ErasesInProgress(ctx context.Context, drives []string) (int, error)
	TaskStatus(ctx context.Context, uri string) (*bmc.Task, error)
	BootProgress(ctx context.Context) (string, time.Time, error)
}

// BMCs hands out connected BMCs: bmc.Pool in the manager (see FromPool), a fake in unit tests.
type BMCs interface {
	// Get returns the BMC of t, logged in; bmc.ErrConnecting while the connection is being made.
	Get(ctx context.Context, t bmc.Target) (BMC, error)
	// ForgetOwned drops (and logs out) the connection to a BMC address if it serves owner (a
	// host's UID).
	ForgetOwned(address, owner string)
}

// FromPool serves BMCs from a bmc.Pool.
func FromPool(p *bmc.Pool) BMCs { return pool{p} }

type pool struct{ p *bmc.Pool }

func (p pool) Get(ctx context.Context, t bmc.Target) (BMC, error) {
	c, err := p.p.Get(ctx, t)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (p pool) ForgetOwned(address, owner string) { p.p.ForgetOwned(address, owner) }
