package bmc

import (
	"strings"
	"testing"

	"github.com/stmcginnis/gofish/schemas"
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
