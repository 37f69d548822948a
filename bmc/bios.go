package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// systemBios reads the system and its Bios resource.
func (c *client) systemBios(ctx context.Context) (*schemas.ComputerSystem, *schemas.Bios, error) {
	sys, err := c.system(ctx)
	if err != nil {
		return nil, nil, err
	}
	b, err := sys.Bios()
	if err != nil {
		return nil, nil, fmt.Errorf("reading BIOS: %w", classify(err))
	}
	if b == nil {
		return nil, nil, fmt.Errorf("%w: system %s has no Bios resource", ErrNotSupported, c.systemPath)
	}
	return sys, b, nil
}

func (c *client) BIOSAttributes(ctx context.Context) (map[string]any, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, b, err := c.systemBios(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(b.Attributes))
	for k, v := range b.Attributes {
		out[k] = v
	}
	// Some BMCs report an enum by its display value: given as the registry's value name, what
	// settings are written and compared in.
	reg, err := c.attributeRegistry(ctx, b.AttributeRegistry, sys.BiosVersion)
	if err != nil {
		return nil, err
	}
	return valueNames(reg, out), nil
}

func (c *client) CheckBIOSAttributes(ctx context.Context, attrs map[string]any) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.checkedBios(ctx, attrs)
	return err
}

// checkedBios reads the Bios resource and checks attrs against its registry (or its attributes).
func (c *client) checkedBios(ctx context.Context, attrs map[string]any) (*schemas.Bios, error) {
	sys, b, err := c.systemBios(ctx)
	if err != nil {
		return nil, err
	}
	reg, err := c.attributeRegistry(ctx, b.AttributeRegistry, sys.BiosVersion)
	if err != nil {
		return nil, err
	}
	if problems := checkAttributes(reg, b.Attributes, attrs); len(problems) > 0 {
		return nil, &UnknownAttributesError{Problems: problems}
	}
	return b, nil
}

// valueNames returns attrs (as a BMC reports them) with any enum value that is not one of the
// registry's value names but is one's display value replaced by that value name.
func valueNames(reg []schemas.Attributes, attrs map[string]any) map[string]any {
	out := make(map[string]any, len(attrs))
	for name, v := range attrs {
		out[name] = v
		s, ok := v.(string)
		if !ok {
			continue
		}
		for i := range reg {
			if reg[i].AttributeName != name || reg[i].Type != schemas.EnumerationAttributeType {
				continue
			}
			if slices.ContainsFunc(reg[i].Value, func(a schemas.AttributeValue) bool { return a.ValueName == s }) {
				break
			}
			for _, a := range reg[i].Value {
				if a.ValueDisplayName != "" && a.ValueDisplayName == s {
					out[name] = a.ValueName
					break
				}
			}
		}
	}
	return out
}

func (c *client) SetBIOSAttributes(ctx context.Context, attrs map[string]any) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	b, err := c.checkedBios(ctx, attrs)
	if err != nil {
		return err
	}
	raw, _, err := c.raw(ctx, b.ODataID)
	if err != nil {
		return fmt.Errorf("reading %s: %w", b.ODataID, err)
	}
	payload := map[string]any{"Attributes": attrs}
	// Not advertised: some BMCs refuse the annotation; settings apply on the next reset anyway.
	if advertisesApplyTime(raw, schemas.OnResetSettingsApplyTime) {
		payload["@Redfish.SettingsApplyTime"] = map[string]any{"ApplyTime": schemas.OnResetSettingsApplyTime}
	}
	// The settings object lives where the Bios resource says (Bios/Settings, Lenovo's
	// Bios/Pending, Supermicro's Bios/SD, HPE's bios/settings/); a BMC naming none takes the
	// settings on the Bios resource itself. It is PATCHed with its own ETag as If-Match.
	target := settingsObject(raw)
	if target == "" {
		target = b.ODataID
	}
	etag, err := c.etag(ctx, target)
	if err != nil {
		return fmt.Errorf("reading the BIOS settings object %s: %w", target, err)
	}
	if err := c.patch(ctx, target, etag, payload); err != nil {
		return fmt.Errorf("staging BIOS settings at %s: %w", target, err)
	}
	return nil
}

// attributeRegistry finds the BIOS attribute registry the BMC publishes under /Registries; nil
// when it publishes none (then the current attributes are the reference). What it found (or that
// it found none) is kept for this registry name and BIOS version.
func (c *client) attributeRegistry(ctx context.Context, name, biosVersion string) ([]schemas.Attributes, error) {
	if name == "" {
		return nil, nil
	}
	key := name + "@" + biosVersion
	c.registriesMu.Lock()
	reg, ok := c.registries[key]
	c.registriesMu.Unlock()
	if ok {
		return reg, nil
	}
	reg, keep, err := c.readAttributeRegistry(ctx, name)
	if err != nil || !keep {
		return reg, err
	}
	c.registriesMu.Lock()
	defer c.registriesMu.Unlock()
	if c.registries == nil {
		c.registries = map[string][]schemas.Attributes{}
	}
	c.registries[key] = reg
	return reg, nil
}

// readAttributeRegistry reads the registry named name; keep says whether what it found (or that
// it found none) may be kept: not after a failed listing.
func (c *client) readAttributeRegistry(ctx context.Context, name string) (reg []schemas.Attributes, keep bool, err error) {
	files, err := c.with(ctx).Service.Registries()
	if err != nil {
		return nil, false, nil //nolint:nilerr // a BMC without registries: fall back to the current attributes (this time)
	}
	for _, f := range files {
		if !registryMatches(name, f.ID) && !registryMatches(name, f.Registry) {
			continue
		}
		for _, loc := range f.Location {
			if loc.URI == "" {
				continue
			}
			reg, err := schemas.GetAttributeRegistry(c.with(ctx), loc.URI)
			if err != nil {
				return nil, false, fmt.Errorf("reading attribute registry %s: %w", loc.URI, classify(err))
			}
			return reg.RegistryEntries.Attributes, true, nil
		}
	}
	return nil, true, nil
}

// registryMatches tells whether a registry file's Id or Registry names the registry a Bios
// resource names as its AttributeRegistry, as Redfish clients match them: the same prefix and,
// where both give one, the same major version (iDRAC names "BiosAttributeRegistry.v1_0_3" and
// publishes "BiosAttributeRegistry.v1_0_0"; Supermicro names "BiosAttributeRegistry" alone;
// Registry fields read "Prefix.1.0").
func registryMatches(name, file string) bool {
	if name == "" || file == "" {
		return false
	}
	np, nv := registryPrefixMajor(name)
	fp, fv := registryPrefixMajor(file)
	return np == fp && (nv == "" || fv == "" || nv == fv)
}

// registryPrefixMajor splits "Prefix.v1_0_3" or "Prefix.1.0.3" into "Prefix" and "1".
func registryPrefixMajor(s string) (string, string) {
	prefix, version, _ := strings.Cut(s, ".")
	version = strings.TrimPrefix(strings.TrimPrefix(version, "v"), "V")
	major, _, _ := strings.Cut(strings.ReplaceAll(version, "_", "."), ".")
	return prefix, major
}

// checkAttributes lists what the registry (or, without one, the current attributes) rejects.
func checkAttributes(reg []schemas.Attributes, current schemas.SettingsAttributes, attrs map[string]any) []string {
	var problems []string
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		v := attrs[name]
		if reg == nil {
			// No registry: the current value says the attribute exists and its type.
			// Values are never printed: some are passwords.
			cur, ok := current[name]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: unknown attribute", name))
			case cur != nil && kindOf(cur) != kindOf(v): // a null current value (a password) says nothing
				problems = append(problems, fmt.Sprintf("%s: a value of type %s, but the attribute holds type %s", name, kindOf(v), kindOf(cur)))
			}
			continue
		}
		var def *schemas.Attributes
		for i := range reg {
			if reg[i].AttributeName == name {
				def = &reg[i]
				break
			}
		}
		switch {
		case def == nil:
			problems = append(problems, fmt.Sprintf("%s: unknown attribute", name))
		case def.ReadOnly || def.Immutable:
			problems = append(problems, fmt.Sprintf("%s: read-only", name))
		case def.Type == schemas.EnumerationAttributeType:
			s, _ := v.(string)
			ok := false
			allowed := make([]string, 0, len(def.Value))
			for _, a := range def.Value {
				allowed = append(allowed, a.ValueName)
				// Value names only: settings are written and compared in them (BIOSAttributes
				// gives a display value a BMC reports as its value name).
				ok = ok || a.ValueName == s
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: not one of %v", name, allowed))
			}
		case def.Type == schemas.IntegerAttributeType:
			n, ok := toInt(v)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: not an integer", name))
			case def.LowerBound != nil && n < int64(*def.LowerBound), def.UpperBound != nil && n > int64(*def.UpperBound):
				problems = append(problems, fmt.Sprintf("%s: out of range%s", name, bounds(def)))
			}
		case def.Type == schemas.BooleanAttributeType:
			if _, ok := v.(bool); !ok {
				problems = append(problems, fmt.Sprintf("%s: not a boolean", name))
			}
		case def.Type == schemas.StringAttributeType || def.Type == schemas.PasswordAttributeType:
			if _, ok := v.(string); !ok {
				problems = append(problems, fmt.Sprintf("%s: not a string", name))
			}
		}
	}
	return problems
}

// bounds describes an integer attribute's range, e.g. " [1, 8]".
func bounds(def *schemas.Attributes) string {
	lo, hi := "", ""
	if def.LowerBound != nil {
		lo = fmt.Sprint(*def.LowerBound)
	}
	if def.UpperBound != nil {
		hi = fmt.Sprint(*def.UpperBound)
	}
	return " [" + lo + ", " + hi + "]"
}

// kindOf names the JSON type of an attribute value.
func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	if _, ok := toInt(v); ok {
		return "integer"
	}
	if _, ok := v.(float64); ok {
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		return int64(n), n == float64(int64(n))
	}
	return 0, false
}

// advertisesApplyTime says whether the resource's @Redfish.Settings lists t among its
// SupportedApplyTimes.
func advertisesApplyTime(raw []byte, t schemas.SettingsApplyTime) bool {
	var res struct {
		Settings struct {
			SupportedApplyTimes []schemas.SettingsApplyTime
		} `json:"@Redfish.Settings"`
	}
	_ = json.Unmarshal(raw, &res)
	return slices.Contains(res.Settings.SupportedApplyTimes, t)
}
