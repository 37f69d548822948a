package install

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

func TestTheRootDeviceIsTheSmallestDriveMatchingEveryHint(t *testing.T) {
	inv := &infrav1.Inventory{Drives: []infrav1.Drive{
		{Name: "Disk0", SerialNumber: "A", WWN: "0x5000AAA", Model: "MZ7LH960", Vendor: "Samsung", MediaType: "SSD", CapacityBytes: 960e9},
		{Name: "Disk1", SerialNumber: "B", Model: "ST4000NM", Vendor: "Seagate", MediaType: "HDD", CapacityBytes: 4000e9},
		{Name: "Disk2", SerialNumber: "C", Model: "MZ7LH480", Vendor: "SAMSUNG", MediaType: "SSD", CapacityBytes: 480e9},
		{Name: "SD", SerialNumber: "D", CapacityBytes: 2 << 30},
		{Name: "NoID", CapacityBytes: 100e9},
	}}
	for _, tc := range []struct {
		name  string
		hints *infrav1.RootDeviceHints
		want  string // drive name, or the error's text
	}{
		{"no hints: the smallest of 4 GiB or more with an identity", nil, "Disk2"},
		{"serial", &infrav1.RootDeviceHints{SerialNumber: "A"}, "Disk0"},
		{"wwn in another notation", &infrav1.RootDeviceHints{WWN: "naa.5000aaa"}, "Disk0"},
		{"rotational", &infrav1.RootDeviceHints{Rotational: ptr.To(true)}, "Disk1"},
		{"vendor, any case, and a minimum size", &infrav1.RootDeviceHints{Vendor: "samsung", MinSizeGigabytes: 500}, "Disk0"},
		{"model substring", &infrav1.RootDeviceHints{Model: "480"}, "Disk2"},
		{"device name", &infrav1.RootDeviceHints{DeviceName: "Disk1"}, "Disk1"},
		{"a drive without serial or WWN is never chosen", &infrav1.RootDeviceHints{DeviceName: "NoID"}, "no serial number or WWN"},
		{"no match names why per drive", &infrav1.RootDeviceHints{SerialNumber: "Z"}, "Disk0: serial number is not Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RootDevice(tc.hints, inv)
			switch {
			case err != nil && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want %q", err, tc.want)
			case err == nil && got.Name != tc.want:
				t.Errorf("chose %s, want %s", got.Name, tc.want)
			}
		})
	}
	if d, _ := RootDevice(&infrav1.RootDeviceHints{SerialNumber: "A"}, inv); d.WWN != "5000aaa" {
		t.Errorf("WWN recorded as %q, want it as lsblk prints it without 0x: 5000aaa", d.WWN)
	}
}
