// Package bmc is the provider's Redfish layer: one Client per BMC, reused across reconciles, on
// top of gofish. The transport under it keeps one Redfish session per BMC, limits concurrent
// requests, bounds every call with a timeout, retries only what is safe to retry and trips a
// circuit breaker when a BMC stops answering.
package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
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

// BootTarget is a one-time boot source.
type BootTarget string

// Boot targets.
const (
	BootNone      BootTarget = "None"
	BootPxe       BootTarget = "Pxe"
	BootUefiHTTP  BootTarget = "UefiHttp"
	BootCd        BootTarget = "Cd"
	BootHdd       BootTarget = "Hdd"
	BootBiosSetup BootTarget = "BiosSetup"
)

// BootOverride is a boot source override.
type BootOverride struct {
	Target BootTarget
	// Legacy boots in legacy BIOS mode instead of UEFI.
	Legacy bool
	// HTTPBootURI is the image URI for BootUefiHTTP.
	HTTPBootURI string
	// Continuous keeps the override for every boot instead of the next one only.
	Continuous bool
}

// FirmwareTarget is what a firmware update flashes.
type FirmwareTarget string

// Firmware targets.
const (
	FirmwareBIOS FirmwareTarget = "BIOS"
	FirmwareBMC  FirmwareTarget = "BMC"
)

// Task is the progress of an asynchronous BMC operation.
type Task struct {
	URI     string
	State   string // New, Running, Completed, Exception, Killed, Cancelled, …
	Percent int
	Message string
	Done    bool // finished, successfully or not
	Failed  bool
}

// Client is what controllers need from one BMC. Every method honours ctx and is bounded by the
// client's call timeout.
type Client interface {
	// Check verifies that the BMC answers and accepts the credentials.
	Check(ctx context.Context) error
	// Inventory reads the hardware inventory without an agent on the host.
	Inventory(ctx context.Context) (*infrav1.Inventory, error)
	// PowerState reads the system power state.
	PowerState(ctx context.Context) (PowerState, error)
	// Reset requests a power change. It is a no-op when the system is already in (or moving to)
	// the requested state, and it is never resent by a retry. ErrConflict means a transition is
	// in progress.
	Reset(ctx context.Context, t ResetType) error
	// SetBootOverride sets the boot source for the next boot (or every boot).
	SetBootOverride(ctx context.Context, o BootOverride) error
	// InsertMedia inserts image into the virtual CD and, when seed is set, seed (a per-claim
	// NoCloud volume) into a second virtual media device: a USB stick or floppy, else a second
	// CD. ErrNoSeedSlot, before anything is inserted, when the BMC offers no second device. A
	// device already holding the wanted image is left alone; one holding another is ejected first.
	InsertMedia(ctx context.Context, image, seed string) error
	// EjectMedia ejects every virtual medium whose image URL contains match (all of them when
	// match is empty), and inserted media that report no image URL; media someone else mounted
	// (a KVM console) stay. No-op when none.
	EjectMedia(ctx context.Context, match string) error
	// BIOSAttributes reads the current BIOS attributes.
	BIOSAttributes(ctx context.Context) (map[string]any, error)
	// SetBIOSAttributes checks attrs against the BMC's attribute registry, then stages them in
	// the @Redfish.Settings object; they apply on the next reset.
	SetBIOSAttributes(ctx context.Context, attrs map[string]any) error
	// UpdateFirmware starts UpdateService.SimpleUpdate and returns the task monitor URI. When an
	// update is already running on the BMC it returns that task instead of starting another.
	UpdateFirmware(ctx context.Context, imageURI string, target FirmwareTarget) (string, error)
	// TaskStatus reads a task through its monitor or task URI.
	TaskStatus(ctx context.Context, uri string) (*Task, error)
	// ErasesInProgress counts, among the given drives, those still reporting an erase.
	ErasesInProgress(ctx context.Context, drives []string) (int, error)
	// EraseDrives starts a secure erase of every drive of the system (the cleaning primitive) and
	// returns one job per drive; follow each TaskURI with TaskStatus (empty: the BMC erased the
	// drive before answering). ErrNothingToErase when the system has no drive Redfish can erase.
	EraseDrives(ctx context.Context) ([]EraseJob, error)
	// Stats reports the HTTP requests sent and sessions created by this client.
	Stats() Stats
}

// Stats are counters of one client.
type Stats struct {
	Requests int64
	Logins   int64
}

// Options tune a client. Zero values take the defaults noted.
type Options struct {
	// CallTimeout bounds one Client method, retries included. Default 60s.
	CallTimeout time.Duration
	// ConnectWait is how long Pool.Get waits for a new connection (service root and login) before
	// answering ErrConnecting; the connection goes on in the background. Default 250ms.
	ConnectWait time.Duration
	// AttemptTimeout bounds one HTTP request. Default 15s.
	AttemptTimeout time.Duration
	// MaxConcurrentRequests per BMC. Default 4.
	MaxConcurrentRequests int
	// Retries of idempotent requests after a 5xx or no answer. Default 3.
	Retries int
	// Backoff before the first retry; doubles each time. Default 200ms.
	Backoff time.Duration
	// BreakerThreshold consecutive failures open the circuit breaker. Default 5.
	BreakerThreshold int
	// BreakerCooldown is how long an open breaker fails calls fast. Default 30s.
	BreakerCooldown time.Duration
	// Observe, when set, is told about every HTTP request: the BMC base URL, method, status
	// (0 without an answer) and duration. The manager feeds Prometheus with it.
	Observe func(bmc, method string, status int, d time.Duration)
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.CallTimeout, 60*time.Second)
	def(&o.AttemptTimeout, 15*time.Second)
	def(&o.ConnectWait, 250*time.Millisecond)
	def(&o.Backoff, 200*time.Millisecond)
	def(&o.BreakerCooldown, 30*time.Second)
	if o.MaxConcurrentRequests == 0 {
		o.MaxConcurrentRequests = 4
	}
	if o.Retries == 0 {
		o.Retries = 3
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = 5
	}
	return o
}

// Target says which BMC to talk to and how.
type Target struct {
	// Address in RedfishHost form, e.g. redfish://10.0.0.5/redfish/v1/Systems/1.
	Address            string
	Username, Password string
	// CABundle (PEM) verifies the BMC certificate; nil uses the system roots.
	CABundle []byte
	// InsecureSkipVerify disables certificate verification.
	InsecureSkipVerify bool
}

type client struct {
	api        *gofish.APIClient
	tr         *transport
	systemPath string
	opts       Options
}

// Connect creates a client: it reads the service root and, when the address names no system,
// discovers the only system the BMC manages. Credentials are checked on first use (see Check).
func Connect(ctx context.Context, t Target, opts Options) (Client, error) {
	c, err := connect(ctx, t, opts, nil)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// connect makes a client whose transport uses br (a new breaker when nil): the pool passes the
// breaker of the BMC's entry, so failed connects count towards opening it.
func connect(ctx context.Context, t Target, opts Options, br *breaker) (*client, error) {
	opts = opts.withDefaults()
	if br == nil {
		br = newBreaker(opts)
	}
	addr, err := ParseAddress(t.Address)
	if err != nil {
		return nil, err
	}
	base, err := httpTransport(t)
	if err != nil {
		return nil, err
	}
	tr := newTransport(base, addr.BaseURL, t.Username, t.Password, opts, br)
	ctx, cancel := context.WithTimeout(ctx, opts.CallTimeout)
	defer cancel()
	api, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:              addr.BaseURL,
		HTTPClient:            &http.Client{Transport: tr},
		NoModifyTransport:     true,
		ReuseConnections:      true,
		MaxConcurrentRequests: int64(opts.MaxConcurrentRequests),
	})
	if err != nil {
		return nil, fmt.Errorf("reading the Redfish service root of %s: %w", addr.BaseURL, classify(err))
	}
	c := &client{api: api, tr: tr, systemPath: addr.SystemPath, opts: opts}
	if c.systemPath == "" {
		if err := c.discoverSystem(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *client) discoverSystem(ctx context.Context) error {
	systems, err := c.with(ctx).Service.Systems()
	if err != nil {
		return fmt.Errorf("listing systems: %w", classify(err))
	}
	if len(systems) != 1 {
		return fmt.Errorf("the BMC manages %d systems: name one in the address (/redfish/v1/Systems/<id>)", len(systems))
	}
	c.systemPath = systems[0].ODataID
	return nil
}

// with returns the gofish client bound to ctx.
func (c *client) with(ctx context.Context) *gofish.APIClient { return c.api.WithContext(ctx) }

func (c *client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.CallTimeout)
}

func (c *client) system(ctx context.Context) (*schemas.ComputerSystem, error) {
	sys, err := schemas.GetComputerSystem(c.with(ctx), c.systemPath)
	if err != nil {
		return nil, fmt.Errorf("reading system %s: %w", c.systemPath, classify(err))
	}
	return sys, nil
}

func (c *client) Stats() Stats {
	return Stats{Requests: c.tr.requests.Load(), Logins: c.tr.logins.Load()}
}

func (c *client) close(ctx context.Context) { c.tr.logout(ctx) }

func (c *client) Check(ctx context.Context) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.system(ctx)
	return err
}

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
	if _, err := sys.Reset(schemas.ResetType(t)); err != nil {
		return fmt.Errorf("%s reset of %s: %w", t, c.systemPath, classify(err))
	}
	return nil
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

func (c *client) SetBootOverride(ctx context.Context, o BootOverride) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return err
	}
	b := &schemas.Boot{
		BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled,
		BootSourceOverrideTarget:  schemas.BootSource(o.Target),
		BootSourceOverrideMode:    schemas.UEFIBootSourceOverrideMode,
		HTTPBootURI:               o.HTTPBootURI,
	}
	if o.Continuous {
		b.BootSourceOverrideEnabled = schemas.ContinuousBootSourceOverrideEnabled
	}
	if o.Legacy {
		b.BootSourceOverrideMode = schemas.LegacyBootSourceOverrideMode
	}
	if o.Target == BootNone {
		b.BootSourceOverrideEnabled = schemas.DisabledBootSourceOverrideEnabled
	}
	if err := sys.SetBoot(b); err != nil {
		return fmt.Errorf("setting boot override %s: %w", o.Target, classify(err))
	}
	return nil
}

// virtualMedia lists the virtual media devices: under the system (Redfish 1.13+) or its manager.
func (c *client) virtualMedia(ctx context.Context) ([]*schemas.VirtualMedia, error) {
	sys, err := c.system(ctx)
	if err != nil {
		return nil, err
	}
	media, err := sys.VirtualMedia()
	if err != nil || len(media) == 0 {
		managers, merr := sys.ManagedBy()
		if merr != nil {
			return nil, fmt.Errorf("finding virtual media: %w", classify(merr))
		}
		for _, m := range managers {
			vm, verr := m.VirtualMedia()
			if verr == nil {
				media = append(media, vm...)
			}
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
		return nil, nil, errors.New("the BMC offers no CD/DVD virtual media")
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

func (c *client) InsertMedia(ctx context.Context, image, seed string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
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

func (c *client) bios(ctx context.Context) (*schemas.Bios, error) {
	sys, err := c.system(ctx)
	if err != nil {
		return nil, err
	}
	b, err := sys.Bios()
	if err != nil {
		return nil, fmt.Errorf("reading BIOS: %w", classify(err))
	}
	return b, nil
}

func (c *client) BIOSAttributes(ctx context.Context) (map[string]any, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	b, err := c.bios(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(b.Attributes))
	for k, v := range b.Attributes {
		out[k] = v
	}
	return out, nil
}

func (c *client) SetBIOSAttributes(ctx context.Context, attrs map[string]any) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	b, err := c.bios(ctx)
	if err != nil {
		return err
	}
	reg, err := c.attributeRegistry(ctx, b.AttributeRegistry)
	if err != nil {
		return err
	}
	if problems := checkAttributes(reg, b.Attributes, attrs); len(problems) > 0 {
		return &UnknownAttributesError{Problems: problems}
	}
	settings := schemas.SettingsAttributes{}
	for k, v := range attrs {
		settings[k] = v
	}
	if err := b.UpdateBiosAttributesApplyAt(settings, schemas.OnResetSettingsApplyTime); err != nil {
		return fmt.Errorf("staging BIOS settings: %w", classify(err))
	}
	return nil
}

// attributeRegistry finds the BIOS attribute registry the BMC publishes under /Registries; nil
// when it publishes none (then the current attributes are the reference).
func (c *client) attributeRegistry(ctx context.Context, name string) ([]schemas.Attributes, error) {
	if name == "" {
		return nil, nil
	}
	files, err := c.with(ctx).Service.Registries()
	if err != nil {
		return nil, nil //nolint:nilerr // a BMC without registries: fall back to the current attributes
	}
	for _, f := range files {
		if f.ID != name && !strings.HasPrefix(name, f.Registry) && f.Registry != name {
			continue
		}
		for _, loc := range f.Location {
			if loc.URI == "" {
				continue
			}
			reg, err := schemas.GetAttributeRegistry(c.with(ctx), loc.URI)
			if err != nil {
				return nil, fmt.Errorf("reading attribute registry %s: %w", loc.URI, classify(err))
			}
			return reg.RegistryEntries.Attributes, nil
		}
	}
	return nil, nil
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
			if _, ok := current[name]; !ok {
				problems = append(problems, fmt.Sprintf("%s: unknown attribute", name))
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
				ok = ok || a.ValueName == s
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %v is not one of %v", name, v, allowed))
			}
		case def.Type == schemas.IntegerAttributeType:
			n, ok := toInt(v)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: %v is not an integer", name, v))
			case def.LowerBound != nil && n < int64(*def.LowerBound), def.UpperBound != nil && n > int64(*def.UpperBound):
				problems = append(problems, fmt.Sprintf("%s: %d is out of range", name, n))
			}
		case def.Type == schemas.BooleanAttributeType:
			if _, ok := v.(bool); !ok {
				problems = append(problems, fmt.Sprintf("%s: %v is not a boolean", name, v))
			}
		case def.Type == schemas.StringAttributeType || def.Type == schemas.PasswordAttributeType:
			if _, ok := v.(string); !ok {
				problems = append(problems, fmt.Sprintf("%s: %v is not a string", name, v))
			}
		}
	}
	return problems
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

func (c *client) UpdateFirmware(ctx context.Context, imageURI string, target FirmwareTarget) (string, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	api := c.with(ctx)
	// Never flash twice: an update still running on the BMC (started by an earlier call whose
	// answer got lost) is the one to follow.
	if uri, err := c.runningUpdate(api); err != nil || uri != "" {
		return uri, err
	}
	us, err := api.Service.UpdateService()
	if err != nil {
		return "", fmt.Errorf("reading UpdateService: %w", classify(err))
	}
	var targets []string
	if target == FirmwareBMC {
		sys, err := c.system(ctx)
		if err != nil {
			return "", err
		}
		managers, err := sys.ManagedBy()
		if err != nil || len(managers) == 0 {
			return "", fmt.Errorf("finding the BMC manager to update: %w", classify(err))
		}
		targets = []string{managers[0].ODataID}
	} else {
		targets = []string{c.systemPath}
	}
	protocol := schemas.HTTPTransferProtocolType
	if strings.HasPrefix(imageURI, "https://") {
		protocol = schemas.HTTPSTransferProtocolType
	}
	info, err := us.SimpleUpdate(&schemas.UpdateServiceSimpleUpdateParameters{ImageURI: imageURI, Targets: targets, TransferProtocol: protocol})
	if err != nil {
		return "", fmt.Errorf("starting firmware update: %w", classify(err))
	}
	if info == nil || info.TaskMonitor == "" {
		return "", errors.New("the BMC accepted the update without a task monitor to follow")
	}
	return info.TaskMonitor, nil
}

func (c *client) runningUpdate(api *gofish.APIClient) (string, error) {
	ts, err := api.Service.Tasks()
	if err != nil || ts == nil {
		return "", nil //nolint:nilerr // a BMC without a TaskService cannot tell: go on
	}
	tasks, err := ts.Tasks()
	if err != nil {
		return "", fmt.Errorf("listing tasks: %w", classify(err))
	}
	for _, t := range tasks {
		if t.TaskState == schemas.RunningTaskState || t.TaskState == schemas.NewTaskState || t.TaskState == schemas.StartingTaskState {
			if t.TaskMonitor != "" {
				return t.TaskMonitor, nil
			}
			return t.ODataID, nil
		}
	}
	return "", nil
}

// TaskStatus reads a task monitor (or task) the way Redfish defines it: 202 while the operation
// runs; once it ended, the operation's own answer (often 204 without a body) or, for a Task
// resource, its final TaskState; 404 once the BMC forgot a finished monitor.
func (c *client) TaskStatus(ctx context.Context, uri string) (*Task, error) {
	if uri == "" {
		return nil, errors.New("no task URI to read")
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.with(ctx).Get(uri)
	if err != nil {
		var re *schemas.Error
		if errors.As(err, &re) {
			switch code := re.HTTPReturnedStatusCode; {
			case code == http.StatusNotFound:
				// Forgotten: the outcome is unknown, so it counts as failed (fail closed).
				return &Task{URI: uri, State: "Gone", Done: true, Failed: true, Message: "the BMC no longer knows this task; its outcome is unknown"}, nil
			case code >= 400 && code != http.StatusUnauthorized && code != http.StatusForbidden && code != http.StatusServiceUnavailable:
				// The operation's own (failed) answer.
				return &Task{URI: uri, State: string(schemas.ExceptionTaskState), Done: true, Failed: true, Message: Redact(re.Message)}, nil
			}
		}
		return nil, fmt.Errorf("reading task %s: %w", uri, classify(err))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading task %s: %w", uri, classify(err))
	}
	t := &schemas.Task{}
	if len(body) == 0 || json.Unmarshal(body, t) != nil || t.TaskState == "" {
		// Not a Task: the operation's own answer once it ended, or a bare 202 while it runs.
		if resp.StatusCode == http.StatusAccepted {
			return &Task{URI: uri, State: string(schemas.RunningTaskState)}, nil
		}
		return &Task{URI: uri, State: string(schemas.CompletedTaskState), Done: true}, nil
	}
	out := &Task{URI: uri, State: string(t.TaskState)}
	if t.PercentComplete != nil {
		out.Percent = int(*t.PercentComplete)
	}
	if len(t.Messages) > 0 {
		out.Message = t.Messages[len(t.Messages)-1].Message
	}
	switch t.TaskState {
	case schemas.CompletedTaskState:
		out.Done = true
	case schemas.ExceptionTaskState, schemas.KilledTaskState, schemas.CancelledTaskState:
		out.Done, out.Failed = true, true
	}
	return out, nil
}

// ErasesInProgress counts, among drives (their Redfish paths), those that report a sanitize or
// erase operation not yet at 100%: the check that an erase whose task said it ended really did.
func (c *client) ErasesInProgress(ctx context.Context, drives []string) (int, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return 0, err
	}
	storages, err := sys.Storage()
	if err != nil {
		return 0, fmt.Errorf("listing storage: %w", classify(err))
	}
	n := 0
	for _, st := range storages {
		all, err := st.Drives()
		if err != nil {
			return 0, fmt.Errorf("listing drives of %s: %w", st.ODataID, classify(err))
		}
		for _, d := range all {
			if !slices.Contains(drives, d.ODataID) {
				continue
			}
			var res struct {
				Operations []struct {
					OperationName      string
					PercentageComplete *int
				}
			}
			if json.Unmarshal(d.RawData, &res) != nil {
				continue
			}
			for _, op := range res.Operations {
				name := strings.ToLower(op.OperationName)
				if (strings.Contains(name, "sanitiz") || strings.Contains(name, "erase")) && (op.PercentageComplete == nil || *op.PercentageComplete < 100) {
					n++
					break
				}
			}
		}
	}
	return n, nil
}

// EraseJob is the erase of one drive, started on the BMC.
type EraseJob struct {
	// Drive is the drive's Redfish path.
	Drive string
	// TaskURI is where the erase's progress is read (TaskStatus); empty when the BMC finished
	// before it answered.
	TaskURI string
}

func (c *client) EraseDrives(ctx context.Context) ([]EraseJob, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return nil, err
	}
	storages, err := sys.Storage()
	if err != nil {
		return nil, fmt.Errorf("listing storage: %w", classify(err))
	}
	var jobs []EraseJob
	without := 0
	for _, st := range storages {
		drives, err := st.Drives()
		if err != nil {
			return nil, fmt.Errorf("listing drives of %s: %w", st.ODataID, classify(err))
		}
		for _, d := range drives {
			if !offersSecureErase(d.RawData) {
				without++
				continue
			}
			info, err := d.SecureErase(1, schemas.CryptographicEraseDataSanitizationType)
			if err != nil {
				return jobs, fmt.Errorf("erasing drive %s: %w", d.ODataID, classify(err))
			}
			job := EraseJob{Drive: d.ODataID}
			if info != nil {
				// The Task resource outlives its monitor on most BMCs and keeps the final state.
				job.TaskURI = info.TaskMonitor
				if info.Task != nil && info.Task.ODataID != "" {
					job.TaskURI = info.Task.ODataID
				}
			}
			jobs = append(jobs, job)
		}
	}
	if len(jobs) == 0 {
		simple := 0
		if ss, err := sys.SimpleStorage(); err == nil {
			for _, s := range ss {
				simple += len(s.Devices)
			}
		}
		return nil, fmt.Errorf("%w: %d Storage drives without Drive.SecureErase, %d devices behind SimpleStorage (which has no erase)", ErrNothingToErase, without, simple)
	}
	return jobs, nil
}

// offersSecureErase says whether a drive's resource advertises the Drive.SecureErase action.
func offersSecureErase(raw []byte) bool {
	var d struct {
		Actions struct {
			SecureErase struct {
				Target string `json:"target"`
			} `json:"#Drive.SecureErase"`
		}
	}
	return json.Unmarshal(raw, &d) == nil && d.Actions.SecureErase.Target != ""
}

// classify maps BMC answers to the package's sentinel errors, keeping the original text, with
// secrets redacted: BMCs echo rejected values (an image URL with its seed token) in their error
// bodies, and errors end up in conditions, events and logs.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var re *schemas.Error
	if errors.As(err, &re) {
		switch re.HTTPReturnedStatusCode {
		case http.StatusConflict:
			return fmt.Errorf("%w: %s", ErrConflict, Redact(re.Message))
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%w: %s", ErrAuth, Redact(re.Message))
		}
	}
	return &redactedError{msg: Redact(err.Error()), err: err}
}

// redactedError shows a redacted text; errors.Is and errors.As still see the BMC's error.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

var (
	// seedToken matches the 256-bit tokens of per-claim seed URLs.
	seedToken = regexp.MustCompile(`[0-9a-fA-F]{64}`)
	// urlUserinfo matches credentials in URLs (scheme://user:password@host).
	urlUserinfo = regexp.MustCompile(`(://)[^/@\s"']+@`)
)

// Redact removes secrets a text may carry: seed tokens and credentials in URLs.
func Redact(s string) string {
	s = seedToken.ReplaceAllString(s, "REDACTED")
	return urlUserinfo.ReplaceAllString(s, "${1}REDACTED@")
}
