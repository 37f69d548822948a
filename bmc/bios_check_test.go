package bmc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// What a BIOS-settings maintenance is refused for before anything happens: each problem named, no
// value of the BMC's printed.
func TestBIOSAttributesAreCheckedAgainstTheRegistryOrTheCurrentValues(t *testing.T) {
	lo, hi := uint64(1), uint64(8)
	reg := []schemas.Attributes{
		{AttributeName: "BootMode", Type: schemas.EnumerationAttributeType, Value: []schemas.AttributeValue{{ValueName: "Uefi"}, {ValueName: "LegacyBios"}}},
		{AttributeName: "NumaGroupSizeOpt", Type: schemas.IntegerAttributeType, LowerBound: &lo, UpperBound: &hi},
		{AttributeName: "SerialNumber", Type: schemas.StringAttributeType, ReadOnly: true},
		{AttributeName: "TpmEnabled", Type: schemas.BooleanAttributeType},
	}
	got := strings.Join(checkAttributes(reg, nil, map[string]any{
		"BootMode": "Floppy", "NumaGroupSizeOpt": float64(9), "SerialNumber": "x", "TpmEnabled": "yes", "Turbo": "On",
	}), "; ")
	for _, want := range []string{"BootMode: not one of [Uefi LegacyBios]", "NumaGroupSizeOpt: out of range [1, 8]",
		"SerialNumber: read-only", "TpmEnabled: not a boolean", "Turbo: unknown attribute"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
	for _, value := range []string{"Floppy", "9", "yes"} {
		if strings.Contains(got, value) {
			t.Errorf("problems %q show the value %q (some attributes are passwords)", got, value)
		}
	}
	if p := checkAttributes(reg, nil, map[string]any{"BootMode": "Uefi", "NumaGroupSizeOpt": float64(4), "TpmEnabled": true}); len(p) != 0 {
		t.Errorf("valid attributes refused: %v", p)
	}
	// No registry: the current attributes say which exist and their types.
	current := schemas.SettingsAttributes{"BootMode": "Uefi", "AdminPassword": nil}
	got = strings.Join(checkAttributes(nil, current, map[string]any{"BootMode": float64(1), "AdminPassword": "s3cret", "Turbo": "On"}), "; ")
	if !strings.Contains(got, "BootMode: a value of type integer, but the attribute holds type string") {
		t.Errorf("problems %q lack the type mismatch of BootMode", got)
	}
	if !strings.Contains(got, "Turbo: unknown attribute") || strings.Contains(got, "AdminPassword") || strings.Contains(got, "s3cret") {
		t.Errorf("problems %q: want Turbo unknown, a password attribute accepted and never printed", got)
	}
}

// A BMC whose Bios resource names its registry differently from the registry file's Id (iDRAC a
// later minor version, Supermicro the prefix alone) still has its values checked against that
// registry, and the registry is read once per BIOS version, not on every check.
func TestBIOSRegistryFoundByPrefixAndMajorVersionAndReadOnce(t *testing.T) {
	for _, profile := range []string{"dmtf", "dell-idrac9", "supermicro-x13"} {
		t.Run(profile, func(t *testing.T) {
			ctx := context.Background()
			s := newSim(t, simulator.Config{Profile: simulator.Profiles[profile]})
			c := connectTo(t, s, Options{})
			err := c.CheckBIOSAttributes(ctx, map[string]any{"BootMode": "Floppy"})
			var bad *UnknownAttributesError
			if !errors.As(err, &bad) || !strings.Contains(strings.Join(bad.Problems, ";"), "BootMode: not one of [Uefi LegacyBios]") {
				t.Fatalf("an enum value the registry does not list = %v, want it refused by the registry", err)
			}
			first := s.Stats().Requests["GET"]
			if err := c.CheckBIOSAttributes(ctx, map[string]any{"BootMode": "Uefi"}); err != nil {
				t.Fatal(err)
			}
			if n := s.Stats().Requests["GET"] - first; n > 3 {
				t.Errorf("a second check made %d GETs, want the system and its Bios (the registry kept)", n)
			}
		})
	}
	for _, tc := range []struct {
		name, file string
		want       bool
	}{
		{"BiosAttributeRegistry.v1_0_3", "BiosAttributeRegistry.v1_0_0", true},
		{"BiosAttributeRegistry", "BiosAttributeRegistry.v1_0_0", true},
		{"BiosAttributeRegistryP89.v1_0_0", "BiosAttributeRegistryP89.1.0", true},
		{"BiosAttributeRegistry.v2_0_0", "BiosAttributeRegistry.v1_0_0", false},
		{"BiosAttributeRegistryG9.v1_0_0", "BiosAttributeRegistry.v1_0_0", false},
		{"Base.1.0", "", false},
	} {
		if got := registryMatches(tc.name, tc.file); got != tc.want {
			t.Errorf("registryMatches(%q, %q) = %v, want %v", tc.name, tc.file, got, tc.want)
		}
	}
}

// Some BMCs report an enum by its display value: it reads as the registry's value name (what
// settings are written and compared in), and a setting is asked for by value name only.
func TestBIOSEnumDisplayValuesReadAsValueNames(t *testing.T) {
	reg := []schemas.Attributes{{AttributeName: "BootMode", Type: schemas.EnumerationAttributeType,
		Value: []schemas.AttributeValue{{ValueName: "Uefi", ValueDisplayName: "UEFI Mode"}, {ValueName: "LegacyBios", ValueDisplayName: "Uefi"}}}}
	if got := valueNames(reg, map[string]any{"BootMode": "UEFI Mode", "Other": 3}); got["BootMode"] != "Uefi" || got["Other"] != 3 {
		t.Errorf("read %v, want BootMode Uefi", got)
	}
	// A value name stays itself even where it is another value's display value.
	if got := valueNames(reg, map[string]any{"BootMode": "Uefi"}); got["BootMode"] != "Uefi" {
		t.Errorf("read %v, want BootMode Uefi", got)
	}
	if p := checkAttributes(reg, nil, map[string]any{"BootMode": "UEFI Mode"}); len(p) != 1 || !strings.Contains(p[0], "not one of [Uefi LegacyBios]") {
		t.Errorf("a display value asked for: %v, want it refused naming the value names", p)
	}
}
