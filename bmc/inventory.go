package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stmcginnis/gofish/schemas"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// Inventory reads the system, its processors, memory, NICs, drives and the BIOS/BMC firmware
// versions. Sub-resources a BMC does not implement are left empty rather than failing the read.
func (c *client) Inventory(ctx context.Context) (*infrav1.Inventory, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return nil, err
	}
	inv := &infrav1.Inventory{
		UUID: sys.UUID, Manufacturer: sys.Manufacturer, Model: sys.Model, SerialNumber: sys.SerialNumber,
		CPUModel: sys.ProcessorSummary.Model, BIOSVersion: sys.BiosVersion,
	}
	if n := sys.ProcessorSummary.Count; n != nil {
		inv.CPUCount = int32(*n) //nolint:gosec // socket counts fit
	}
	if n := sys.ProcessorSummary.CoreCount; n != nil {
		inv.CPUCores = int32(*n) //nolint:gosec // core counts fit
	}
	if gib := sys.MemorySummary.TotalSystemMemoryGiB; gib != nil {
		inv.MemoryMiB = int64(*gib * 1024)
	}
	if dimms, err := sys.Memory(); err == nil {
		var total int64
		for _, m := range dimms {
			// Installed modules only: BMCs list empty slots too (State Absent, no capacity).
			if m.Status.State == schemas.AbsentState || m.CapacityMiB == nil || *m.CapacityMiB == 0 {
				continue
			}
			d := infrav1.DIMM{Name: m.ID, CapacityMiB: int64(*m.CapacityMiB), Type: string(m.MemoryDeviceType),
				Manufacturer: m.Manufacturer, PartNumber: strings.TrimSpace(m.PartNumber), SerialNumber: m.SerialNumber}
			if m.OperatingSpeedMhz != nil {
				d.SpeedMHz = int32(*m.OperatingSpeedMhz) //nolint:gosec // memory speeds fit
			}
			total += d.CapacityMiB
			inv.DIMMs = append(inv.DIMMs, d)
		}
		if inv.MemoryMiB == 0 {
			inv.MemoryMiB = total // a BMC without MemorySummary
		}
	}
	if inv.CPUCores == 0 {
		if procs, err := sys.Processors(); err == nil {
			for _, p := range procs {
				if p.TotalCores != nil {
					inv.CPUCores += int32(*p.TotalCores) //nolint:gosec // core counts fit
				}
			}
		}
	}
	if nics, err := sys.EthernetInterfaces(); err == nil {
		for _, n := range nics {
			// The server's own ports only: not VLAN sub-interfaces (EthernetInterfaceType
			// Virtual) nor the BMC's host interface (Virtual, or untyped and linked from
			// Links.HostInterface, as most vendors list it), and by the address burnt in, which
			// is what DHCP and the boot MAC see before an OS sets another (a bond).
			if n.EthernetInterfaceType == schemas.VirtualEthernetDeviceType || linksHostInterface(n.RawData) { // VLAN.VLANEnable is a physical port's own tagging
				continue
			}
			mac := n.PermanentMACAddress
			if mac == "" {
				mac = n.MACAddress
			}
			nic := infrav1.NIC{Name: n.ID, MAC: strings.ToLower(mac)}
			if n.SpeedMbps != nil {
				nic.SpeedMbps = int32(*n.SpeedMbps) //nolint:gosec // link speeds fit
			}
			inv.NICs = append(inv.NICs, nic)
		}
	} else {
		return nil, fmt.Errorf("reading NICs: %w", classify(err))
	}
	if storages, err := sys.Storage(); err == nil {
		for _, st := range storages {
			drives, err := st.Drives()
			if err != nil {
				return nil, fmt.Errorf("reading drives of %s: %w", st.ODataID, classify(err))
			}
			for _, d := range drives {
				if d.Status.State == schemas.AbsentState {
					continue // an empty bay
				}
				drive := infrav1.Drive{Name: d.ID, Model: d.Model, SerialNumber: d.SerialNumber, MediaType: string(d.MediaType), Vendor: d.Manufacturer, WWN: wwn(d.Identifiers)}
				if d.CapacityBytes != nil {
					drive.CapacityBytes = int64(*d.CapacityBytes)
				}
				inv.Drives = append(inv.Drives, drive)
			}
		}
	}
	if len(inv.Drives) == 0 {
		// Older BMCs list drives only as SimpleStorage devices.
		if controllers, err := sys.SimpleStorage(); err == nil {
			for _, st := range controllers {
				for _, d := range st.Devices {
					if d.Status.State == schemas.AbsentState {
						continue // an empty bay
					}
					drive := infrav1.Drive{Name: d.Name, Model: d.Model}
					if d.CapacityBytes != nil {
						drive.CapacityBytes = int64(*d.CapacityBytes) //nolint:gosec // drive sizes fit
					}
					inv.Drives = append(inv.Drives, drive)
				}
			}
		}
	}
	if managers, err := sys.ManagedBy(); err == nil && len(managers) > 0 {
		inv.BMCFirmwareVersion = managers[0].FirmwareVersion
	}
	return inv, nil
}

// linksHostInterface tells whether an EthernetInterface is the host side of the BMC's host
// interface (Links.HostInterface set).
func linksHostInterface(raw []byte) bool {
	var ni struct {
		Links struct {
			HostInterface struct {
				ID string `json:"@odata.id"`
			} `json:"HostInterface"`
		} `json:"Links"`
	}
	return json.Unmarshal(raw, &ni) == nil && ni.Links.HostInterface.ID != ""
}

// wwn is a drive's world-wide name from its durable names (NAA, or EUI-64 for NVMe), as lsblk
// prints it: lower case, without 0x. "" when it lists none.
func wwn(ids []schemas.Identifier) string {
	for _, id := range ids {
		switch id.DurableNameFormat {
		case schemas.NAADurableNameFormat, schemas.EUIDurableNameFormat:
			w := strings.ToLower(strings.TrimSpace(id.DurableName))
			w = strings.TrimPrefix(strings.TrimPrefix(w, "0x"), "naa.")
			return strings.ReplaceAll(strings.TrimPrefix(w, "eui."), ":", "")
		}
	}
	return ""
}
