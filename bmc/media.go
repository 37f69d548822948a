package bmc

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// virtualMedia lists the virtual media devices: under the system (Redfish 1.13+) or its manager.
func (c *client) virtualMedia(ctx context.Context) ([]*schemas.VirtualMedia, error) {
	sys, err := c.system(ctx)
	if err != nil {
		return nil, err
	}
	// A listing that fails is an error, never "no devices": a BMC answering 503 for a moment
	// must not look like a BMC without virtual media.
	media, err := sys.VirtualMedia()
	if err != nil {
		return nil, fmt.Errorf("listing the system's virtual media: %w", classify(err))
	}
	if len(media) == 0 {
		managers, err := sys.ManagedBy()
		if err != nil {
			return nil, fmt.Errorf("finding virtual media: %w", classify(err))
		}
		for _, m := range managers {
			vm, err := m.VirtualMedia()
			if err != nil {
				return nil, fmt.Errorf("listing the virtual media of manager %s: %w", m.ID, classify(err))
			}
			media = append(media, vm...)
		}
	}
	return media, nil
}

func offers(m *schemas.VirtualMedia, types ...schemas.VirtualMediaType) bool {
	for _, t := range m.MediaTypes {
		if slices.Contains(types, t) {
			return true
		}
	}
	return false
}

var cdTypes = []schemas.VirtualMediaType{schemas.CDVirtualMediaType, schemas.DVDVirtualMediaType}

// slots returns the CD the OS image goes into and the device a seed volume goes into (nil when
// the BMC offers no second device).
func (c *client) slots(ctx context.Context) (cd, seed *schemas.VirtualMedia, err error) {
	media, err := c.virtualMedia(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range media {
		if offers(m, cdTypes...) {
			cd = m
			break
		}
	}
	if cd == nil {
		return nil, nil, fmt.Errorf("%w: the BMC offers no CD/DVD virtual media", ErrNotSupported)
	}
	// A device made for data first, a second CD last.
	for _, types := range [][]schemas.VirtualMediaType{
		{schemas.USBStickVirtualMediaType, schemas.FloppyVirtualMediaType},
		cdTypes,
	} {
		for _, m := range media {
			if m.ODataID != cd.ODataID && offers(m, types...) {
				return cd, m, nil
			}
		}
	}
	return cd, nil, nil
}

// insert puts image into m, ejecting what else it holds; no-op when it already holds image.
func insert(m *schemas.VirtualMedia, image string) error {
	inserted := m.Inserted != nil && *m.Inserted
	if inserted && m.Image == image {
		return nil
	}
	if inserted {
		if _, err := m.EjectMedia(); err != nil {
			return fmt.Errorf("ejecting %s before inserting: %w", m.ID, classify(err))
		}
	}
	yes := true
	if _, err := m.InsertMedia(&schemas.VirtualMediaInsertMediaParameters{Image: image, Inserted: &yes, WriteProtected: &yes}); err != nil {
		return fmt.Errorf("inserting virtual media into %s: %w", m.ID, classify(err))
	}
	return nil
}

// seedOnlySlot returns the device a seed volume goes into when the OS image boots another way
// (UEFI HTTP): a device made for data first, else a CD; nil when the BMC offers none.
func (c *client) seedOnlySlot(ctx context.Context) (*schemas.VirtualMedia, error) {
	media, err := c.virtualMedia(ctx)
	if err != nil {
		return nil, err
	}
	for _, types := range [][]schemas.VirtualMediaType{{schemas.USBStickVirtualMediaType, schemas.FloppyVirtualMediaType}, cdTypes} {
		for _, m := range media {
			if offers(m, types...) {
				return m, nil
			}
		}
	}
	return nil, nil
}

func (c *client) InsertMedia(ctx context.Context, image, seed string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	if image == "" {
		m, err := c.seedOnlySlot(ctx)
		switch {
		case err != nil:
			return err
		case m == nil:
			return ErrNoSeedSlot
		}
		return insert(m, seed)
	}
	cd, seedSlot, err := c.slots(ctx) // one listing of the devices for both
	if err != nil {
		return err
	}
	if seed != "" {
		if seedSlot == nil {
			return ErrNoSeedSlot
		}
		if err := insert(seedSlot, seed); err != nil {
			return err
		}
	}
	return insert(cd, image)
}

func (c *client) EjectMedia(ctx context.Context, match string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	media, err := c.virtualMedia(ctx)
	if err != nil {
		return err
	}
	for _, m := range media {
		if m.Inserted == nil || !*m.Inserted || (m.Image != "" && !strings.Contains(m.Image, match)) {
			continue
		}
		if _, err := m.EjectMedia(); err != nil {
			return fmt.Errorf("ejecting virtual media %s: %w", m.ID, classify(err))
		}
	}
	return nil
}
