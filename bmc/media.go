package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// virtualMedia lists the virtual media devices: under the system (Redfish 1.13+) or its managers.
// Where they live is found once (a read of the system, and of its managers where the system has
// none) and then listed straight: each boot's preparation reads the system one time fewer (on
// some BMCs that read takes a second). Only the collections that held devices are remembered; a
// listing that fails or finds one of them empty (a collection gone or left empty by a BMC
// firmware update that moved the devices, or any other error) looks for them again: an empty
// remembered collection must not read as a BMC without virtual media, nor make an eject eject
// nothing.
func (c *client) virtualMedia(ctx context.Context) ([]*schemas.VirtualMedia, error) {
	if at := c.mediaAt.Load(); at != nil {
		media, held, err := c.listMedia(ctx, *at)
		if err == nil && len(held) == len(*at) {
			return media, nil
		}
		c.mediaAt.CompareAndSwap(at, nil) // found again below, or the error said again
	}
	sys, err := c.system(ctx)
	if err != nil {
		return nil, err
	}
	// A listing that fails is an error, never "no devices": a BMC answering 503 for a moment
	// must not look like a BMC without virtual media.
	at := []string{}
	if uri := link(sys.RawData, "VirtualMedia"); uri != "" {
		at = append(at, uri)
	}
	media, held, err := c.listMedia(ctx, at)
	if err != nil {
		return nil, err
	}
	if len(media) == 0 {
		managers, err := sys.ManagedBy()
		if err != nil {
			return nil, fmt.Errorf("finding virtual media: %w", classify(err))
		}
		at = at[:0]
		for _, m := range managers {
			if uri := link(m.RawData, "VirtualMedia"); uri != "" {
				at = append(at, uri)
			}
		}
		if media, held, err = c.listMedia(ctx, at); err != nil {
			return nil, err
		}
	}
	if len(held) > 0 {
		c.mediaAt.Store(&held)
	}
	return media, nil
}

// listMedia lists the virtual media devices of the collections at, and names those that hold any.
func (c *client) listMedia(ctx context.Context, at []string) (media []*schemas.VirtualMedia, held []string, err error) {
	for _, uri := range at {
		vm, err := schemas.GetCollectionObjects[schemas.VirtualMedia](c.with(ctx), uri)
		if err != nil {
			return nil, nil, fmt.Errorf("listing the virtual media of %s: %w", uri, classify(err))
		}
		if len(vm) > 0 {
			held = append(held, uri)
		}
		media = append(media, vm...)
	}
	return media, held, nil
}

// link is the @odata.id of the resource property prop of a resource's raw JSON links to.
func link(raw []byte, prop string) string {
	var res map[string]json.RawMessage
	if json.Unmarshal(raw, &res) != nil {
		return ""
	}
	var l struct {
		ID string `json:"@odata.id"`
	}
	_ = json.Unmarshal(res[prop], &l)
	return l.ID
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
func (c *client) insert(ctx context.Context, m *schemas.VirtualMedia, image string) error {
	inserted := m.Inserted != nil && *m.Inserted
	if inserted && m.Image == image {
		return nil
	}
	if inserted {
		if err := c.eject(ctx, m); err != nil {
			return fmt.Errorf("ejecting %s before inserting: %w", m.ID, err)
		}
	}
	// By the action where the BMC offers it (a POST without If-Match: some BMCs answer 412 to
	// an action carrying one), else by PATCHing the resource.
	payload := map[string]any{"Image": image, "Inserted": true, "WriteProtected": true}
	if !m.SupportsMediaInsert {
		if err := c.patch(ctx, m.ODataID, m.ODataEtag, payload); err != nil {
			return fmt.Errorf("inserting virtual media into %s: %w", m.ID, err)
		}
		return nil
	}
	// The action's payload varies by BMC (as sushy handles it): one that refuses Inserted and
	// WriteProtected gets them dropped, one that requires TransferProtocolType gets it. A refused
	// action was not carried out, so sending it again is safe.
	target := actionTarget(m.RawData, "#VirtualMedia.InsertMedia", m.ODataID)
	var err error
	for range 3 {
		if err = c.send(ctx, http.MethodPost, target, payload); err == nil {
			return nil
		}
		// Only a 400 that names the parameter (refused, so not carried out) adjusts the payload.
		adjusted := false
		msg := err.Error()
		if statusOf(err) == http.StatusBadRequest {
			_, hasInserted := payload["Inserted"]
			if hasInserted && (strings.Contains(msg, "ActionParameterUnknown") || strings.Contains(msg, "ActionParameterNotSupported")) &&
				(strings.Contains(msg, "Inserted") || strings.Contains(msg, "WriteProtected")) {
				delete(payload, "Inserted")
				delete(payload, "WriteProtected")
				adjusted = true
			}
			if _, ok := payload["TransferProtocolType"]; !ok && strings.Contains(msg, "ActionParameterMissing") && strings.Contains(msg, "TransferProtocolType") {
				payload["TransferProtocolType"] = transferProtocol(image)
				adjusted = true
			}
		}
		if !adjusted {
			break
		}
	}
	return fmt.Errorf("inserting virtual media into %s: %w", m.ID, err)
}

// transferProtocol is the Redfish TransferProtocolType of a URL.
func transferProtocol(url string) string {
	if strings.HasPrefix(url, "https://") {
		return "HTTPS"
	}
	return "HTTP"
}

// eject detaches m and clears its image: by the EjectMedia action where offered, else by a PATCH
// that clears Image too (a PATCH of Inserted alone leaves the image behind on such BMCs).
func (c *client) eject(ctx context.Context, m *schemas.VirtualMedia) error {
	if m.SupportsMediaEject {
		return c.send(ctx, http.MethodPost, actionTarget(m.RawData, "#VirtualMedia.EjectMedia", m.ODataID), map[string]any{})
	}
	return c.patch(ctx, m.ODataID, m.ODataEtag, map[string]any{"Image": nil, "Inserted": false})
}

// seedOnlySlot returns the device a seed volume goes into when the OS image boots another way
// (UEFI HTTP): a free device (or one holding seed already) before one holding something else, a
// device made for data before a CD; nil when the BMC offers none.
func (c *client) seedOnlySlot(ctx context.Context, seed string) (*schemas.VirtualMedia, error) {
	media, err := c.virtualMedia(ctx)
	if err != nil {
		return nil, err
	}
	free := func(m *schemas.VirtualMedia) bool { return m.Inserted == nil || !*m.Inserted || m.Image == seed }
	for _, onlyFree := range []bool{true, false} {
		for _, types := range [][]schemas.VirtualMediaType{{schemas.USBStickVirtualMediaType, schemas.FloppyVirtualMediaType}, cdTypes} {
			for _, m := range media {
				if offers(m, types...) && (!onlyFree || free(m)) {
					return m, nil
				}
			}
		}
	}
	return nil, nil
}

func (c *client) InsertMedia(ctx context.Context, image, seed string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	if image == "" {
		m, err := c.seedOnlySlot(ctx, seed)
		switch {
		case err != nil:
			return err
		case m == nil:
			return ErrNoSeedSlot
		}
		return c.insert(ctx, m, seed)
	}
	cd, seedSlot, err := c.slots(ctx) // one listing of the devices for both
	if err != nil {
		return err
	}
	if seed != "" {
		if seedSlot == nil {
			return ErrNoSeedSlot
		}
		if err := c.insert(ctx, seedSlot, seed); err != nil {
			return err
		}
	}
	return c.insert(ctx, cd, image)
}

func (c *client) EjectMedia(ctx context.Context, match string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	media, err := c.virtualMedia(ctx)
	if err != nil {
		return err
	}
	for _, m := range media {
		inserted := m.Inserted != nil && *m.Inserted
		// An image left behind by a PATCH-only BMC is cleared too (those have no eject action).
		stale := !inserted && m.Image != "" && !m.SupportsMediaEject
		if (!inserted && !stale) || (m.Image != "" && !strings.Contains(m.Image, match)) {
			continue
		}
		if err := c.eject(ctx, m); err != nil {
			return fmt.Errorf("ejecting virtual media %s: %w", m.ID, err)
		}
	}
	return nil
}
