// Package install writes a machine's image to its host's root drive without an agent of the
// provider's: it chooses that drive from the inventory and the host's root device hints, and
// generates the script a deploy image (any live ISO with cloud-init NoCloud, bash, curl and
// qemu-img) runs as its user-data.
package install

import (
	"fmt"
	"sort"
	"strings"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// minRootBytes is the smallest drive taken without hints (Ironic's default too): smaller ones
// are boot media such as SD cards and BOSS modules' spare partitions.
const minRootBytes = 4 << 30

// RootDevice returns the drive a disk install writes to: of the drives that match every hint
// given, the smallest (by capacity, then name). Without hints, the smallest of at least 4 GiB.
// A drive the deploy image cannot find by serial number or WWN is never chosen. The error says
// why none matched.
func RootDevice(hints *infrav1.RootDeviceHints, inv *infrav1.Inventory) (*infrav1.RootDevice, error) {
	if inv == nil || len(inv.Drives) == 0 {
		return nil, fmt.Errorf("the inventory lists no drives")
	}
	var ok []infrav1.Drive
	var why []string
	for _, d := range inv.Drives {
		if reason := mismatch(hints, d); reason != "" {
			why = append(why, d.Name+": "+reason)
			continue
		}
		ok = append(ok, d)
	}
	if len(ok) == 0 {
		if hints == nil {
			return nil, fmt.Errorf("no drive of at least 4 GiB with a serial number or WWN (%s)", strings.Join(why, "; "))
		}
		return nil, fmt.Errorf("no drive matches spec.rootDeviceHints (%s)", strings.Join(why, "; "))
	}
	sort.SliceStable(ok, func(i, j int) bool {
		if ok[i].CapacityBytes != ok[j].CapacityBytes {
			return ok[i].CapacityBytes < ok[j].CapacityBytes
		}
		return ok[i].Name < ok[j].Name
	})
	d := ok[0]
	return &infrav1.RootDevice{Name: d.Name, SerialNumber: d.SerialNumber, WWN: NormalizeWWN(d.WWN), CapacityBytes: d.CapacityBytes}, nil
}

// mismatch says why drive d does not match hints ("" when it does).
func mismatch(hints *infrav1.RootDeviceHints, d infrav1.Drive) string {
	if d.SerialNumber == "" && d.WWN == "" {
		return "no serial number or WWN to find it by"
	}
	if hints == nil {
		if d.CapacityBytes < minRootBytes {
			return "smaller than 4 GiB"
		}
		return ""
	}
	switch {
	case hints.DeviceName != "" && d.Name != hints.DeviceName:
		return "name is not " + hints.DeviceName
	case hints.SerialNumber != "" && d.SerialNumber != hints.SerialNumber:
		return "serial number is not " + hints.SerialNumber
	case hints.WWN != "" && NormalizeWWN(d.WWN) != NormalizeWWN(hints.WWN):
		return "WWN is not " + hints.WWN
	case hints.Model != "" && !strings.Contains(d.Model, hints.Model):
		return "model " + d.Model + " does not contain " + hints.Model
	case hints.Vendor != "" && !strings.Contains(strings.ToLower(d.Vendor), strings.ToLower(hints.Vendor)):
		return "vendor " + d.Vendor + " does not contain " + hints.Vendor
	case hints.MinSizeGigabytes > 0 && d.CapacityBytes < int64(hints.MinSizeGigabytes)*1e9:
		return fmt.Sprintf("%d GB, smaller than %d GB", d.CapacityBytes/1e9, hints.MinSizeGigabytes)
	case hints.Rotational != nil && rotational(d) != *hints.Rotational:
		return "media type is " + d.MediaType
	}
	return ""
}

func rotational(d infrav1.Drive) bool { return strings.EqualFold(d.MediaType, "HDD") }

// NormalizeWWN is a WWN as lsblk prints it, without its 0x: lower case, no naa./eui. prefix.
func NormalizeWWN(w string) string {
	w = strings.ToLower(strings.TrimSpace(w))
	for _, p := range []string{"0x", "naa.", "eui.", "nguid."} {
		w = strings.TrimPrefix(w, p)
	}
	return w
}
