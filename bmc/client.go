// Package bmc is the provider's Redfish layer: one Client per BMC, reused across reconciles, on
// top of gofish. The transport under it keeps one Redfish session per BMC, limits concurrent
// requests, bounds every call with a timeout, retries only what is safe to retry and trips a
// circuit breaker when a BMC stops answering.
package bmc

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

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
	// ResetFrom is Reset for a caller that has just read the power state (observed): one request
	// instead of two once the system's reset target is known.
	ResetFrom(ctx context.Context, t ResetType, observed PowerState) error
	// SetBootOverride sets the boot source for the next boot (or every boot).
	SetBootOverride(ctx context.Context, o BootOverride) error
	// InsertMedia inserts image into the virtual CD and, when seed is set, seed (a per-claim
	// NoCloud volume) into a second virtual media device: a USB stick or floppy, else a second
	// CD. ErrNoSeedSlot, before anything is inserted, when the BMC offers no second device. With
	// image empty (the OS boots another way) seed goes into a USB stick or floppy, else a CD, and
	// ErrNoSeedSlot means no virtual media at all. A device already holding the wanted image is
	// left alone; one holding another is ejected first.
	InsertMedia(ctx context.Context, image, seed string) error
	// EjectMedia ejects every virtual medium whose image URL contains match (all of them when
	// match is empty), and inserted media that report no image URL; media someone else mounted
	// (a KVM console) stay. No-op when none.
	EjectMedia(ctx context.Context, match string) error
	// BIOSAttributes reads the current BIOS attributes.
	BIOSAttributes(ctx context.Context) (map[string]any, error)
	// CheckBIOSAttributes checks attrs against the BMC's attribute registry (or, without one, the
	// current attributes' names and types) and changes nothing: *UnknownAttributesError names each
	// problem (never a value of the BMC's).
	CheckBIOSAttributes(ctx context.Context, attrs map[string]any) error
	// SetBIOSAttributes checks attrs against the BMC's attribute registry, then stages them in
	// the @Redfish.Settings object; they apply on the next reset.
	SetBIOSAttributes(ctx context.Context, attrs map[string]any) error
	// UpdateFirmware starts UpdateService.SimpleUpdate and returns the task monitor URI. When an
	// update is already running on the BMC it returns that task instead of starting another. An
	// update accepted without a monitor is followed through the task the BMC lists; "" means the
	// BMC accepted it and lists no task: verify against the firmware inventory, never resend.
	// creds, when set, are what the BMC (or, for a pushed image, the provider) presents to the
	// image server.
	UpdateFirmware(ctx context.Context, imageURI string, target FirmwareTarget, creds *ImageCredentials) (string, error)
	// UpdateTasks lists the firmware update tasks the BMC's TaskService holds; listed is false
	// when the BMC has no TaskService (it cannot tell).
	UpdateTasks(ctx context.Context) (tasks []UpdateTask, listed bool, err error)
	// BootProgress reads the system's BootProgress.LastState (e.g. SetupEntered, OSRunning) and
	// when it was entered (zero when the BMC does not say); "" when the BMC reports none.
	BootProgress(ctx context.Context) (string, time.Time, error)
	// FirmwareVersion reads the version of the BIOS or the BMC firmware running now.
	FirmwareVersion(ctx context.Context, target FirmwareTarget) (string, error)
	// TaskStatus reads a task through its monitor or task URI.
	TaskStatus(ctx context.Context, uri string) (*Task, error)
	// ErasesInProgress counts, among the given drives, those still reporting an erase.
	ErasesInProgress(ctx context.Context, drives []string) (int, error)
	// EraseDrives starts a secure erase of every drive present in the system (the cleaning
	// primitive; empty bays are not drives) and returns one job per drive; follow each TaskURI
	// with TaskStatus, then ErasesInProgress until the drives report no erase (an empty TaskURI
	// does not mean the erase ended: some BMCs answer 202 without a monitor). Nothing is erased
	// when a drive offers no erase: ErrDrivesNotErasable names such drives, ErrNothingToErase
	// says none offers one. exempt names drives (Id or serial number) that may stay unerased
	// when they offer no erase; a drive that offers one is erased all the same.
	EraseDrives(ctx context.Context, exempt, expected []string) ([]EraseJob, error)
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
	// PushTimeout bounds a firmware image's download and its push to a BMC that takes images only
	// by multipart HTTP push. Default 30m.
	PushTimeout time.Duration
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
	// ImageRootCAs verify the HTTPS image servers the provider downloads firmware images from
	// (for BMCs that only take a pushed image); nil: the system's roots.
	ImageRootCAs *x509.CertPool
	// UserAgent, when set, is the User-Agent header of every request to a BMC: BMCs keep it in
	// their audit logs, which then name the manager replica that sent a request.
	UserAgent string
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
	def(&o.PushTimeout, 30*time.Minute)
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
	// BasicAuth sends the credentials with every request (HTTP Basic) instead of creating a
	// Redfish session: for BMCs whose few sessions other tools use up.
	BasicAuth bool
	// Owner names the object the connection is made for (the RedfishHost's UID): Pool.ForgetOwned
	// drops a client only for the owner whose connection made it, so a host removed by force gives
	// its session back without taking the client of a host created at its address since.
	Owner string
}

type client struct {
	api        *gofish.APIClient
	tr         *transport
	systemPath string
	opts       Options
	// resetAction is the system's ComputerSystem.Reset action, from its last read (see ResetFrom).
	resetAction atomic.Pointer[resetAction]
	// mediaAt lists the collections the virtual media devices were found in (the system's, or
	// its managers'), so that a later listing need not read the system again (see virtualMedia).
	mediaAt atomic.Pointer[[]string]
	// lastRead is the system as last read (see recentSystem); changes counts the client's own
	// changes of the system's boot settings, begun and ended: a read made across one is not used.
	lastRead atomic.Pointer[systemRead]
	changes  atomic.Uint64
	// registries caches BIOS attribute registries by the name the Bios resource gives and the
	// BIOS version (a flash may change the registry): reading one takes a request per registry
	// file the BMC lists and the registry itself (a megabyte on some BMCs).
	registriesMu sync.Mutex
	registries   map[string][]schemas.Attributes
}

// systemRead is a read of the system, when it was made, and the client's changes count then.
type systemRead struct {
	sys     *schemas.ComputerSystem // shared: read only
	at      time.Time
	changes uint64
}

// bootReadMaxAge is how old a read of the system a boot override may be shaped by (see
// recentSystem).
const bootReadMaxAge = 10 * time.Second

// Standalone is a client of its own (not a pool's): Close logs its session out.
type Standalone interface {
	Client
	// Close logs the session out (waiting at most 10 seconds) and closes idle connections.
	Close()
}

// Connect creates a client outside any pool: it reads the service root and, when the address
// names no system, discovers the only system the BMC manages. Credentials are checked on first
// use (see Check). Close it when done, or its session stays on the BMC until it times out (BMCs
// hold a handful).
func Connect(ctx context.Context, t Target, opts Options) (Standalone, error) {
	c, err := connect(ctx, t, opts, nil)
	if err != nil {
		return nil, err
	}
	return standalone{c}, nil
}

type standalone struct{ *client }

func (s standalone) Close() {
	s.close(10 * time.Second)
	s.tr.closeIdle()
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
	tr.basicAuth = t.BasicAuth
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
	if err := c.readSessionsLink(ctx); err != nil {
		return nil, err
	}
	if c.systemPath == "" {
		if err := c.discoverSystem(ctx); err != nil {
			// Listing the systems logged in: a connection retried every reconcile must not
			// fill the BMC's session table.
			// The call's context may be what ended (a timeout): log out on one of its own.
			c.close(opts.AttemptTimeout)
			c.tr.closeIdle()
			return nil, err
		}
	}
	return c, nil
}

// readSessionsLink reads where the BMC keeps its session collection from the service root (public):
// not every BMC keeps it at /redfish/v1/SessionService/Sessions.
func (c *client) readSessionsLink(ctx context.Context) error {
	resp, err := c.with(ctx).Get("/redfish/v1/")
	if err != nil {
		return fmt.Errorf("reading the service root: %w", classify(err))
	}
	defer func() { _ = resp.Body.Close() }()
	var root struct {
		Links struct {
			Sessions struct {
				ID string `json:"@odata.id"`
			}
		}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&root); err == nil && strings.HasPrefix(root.Links.Sessions.ID, "/") {
		c.tr.setSessionsPath(root.Links.Sessions.ID)
	}
	return nil
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

// system reads the system now. The result is kept for recentSystem: never modify it.
func (c *client) system(ctx context.Context) (*schemas.ComputerSystem, error) {
	changes := c.changes.Load()
	sys, err := schemas.GetComputerSystem(c.with(ctx), c.systemPath)
	if err != nil {
		return nil, fmt.Errorf("reading system %s: %w", c.systemPath, classify(err))
	}
	ra := resetActionOf(sys)
	c.resetAction.Store(&ra)
	c.lastRead.Store(&systemRead{sys: sys, at: time.Now(), changes: changes})
	return sys, nil
}

// recentSystem is the system as read within maxAge by any call of this client, unless the client
// changed the system's boot settings meanwhile; else it is read now. The result is shared: never
// modify it. Only for what does not depend on the moment: what the system offers (allowed boot
// targets, whether it has a boot mode), and its entity tag (a stale one is answered 412, and
// patch reads it again). Another client (a person at the BMC's console) may have changed the boot
// settings since the read: what is sent never depends on them, and the one use of them (whether a
// UEFI HTTP boot URI left behind is cleared) may miss a URI set in those seconds, which a boot
// target other than UEFI HTTP ignores. A boot's round reads the power state,
// then shapes the boot override by that same read: on BMCs whose system read takes a second, each
// boot is a second or two quicker.
func (c *client) recentSystem(ctx context.Context, maxAge time.Duration) (*schemas.ComputerSystem, error) {
	if r := c.lastRead.Load(); r != nil && time.Since(r.at) < maxAge && r.changes == c.changes.Load() {
		return r.sys, nil
	}
	return c.system(ctx)
}

func (c *client) Stats() Stats {
	return Stats{Requests: c.tr.requests.Load(), Logins: c.tr.logins.Load()}
}

// close logs the client's session out (within d once any login under way has ended); the client
// opens no session after.
func (c *client) close(d time.Duration) { c.tr.logout(d) }

func (c *client) Check(ctx context.Context) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.system(ctx)
	return err
}
