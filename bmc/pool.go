package bmc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// Pool keeps one Client per BMC address for the life of the manager, so reconciles reuse the
// BMC's Redfish session instead of logging in each time. A client is replaced when the
// credentials or TLS settings for its address change (its old session is logged out). An entry
// belongs to the owner (Target.Owner) whose connection made it: ForgetOwned drops it for that
// owner only.
type Pool struct {
	opts Options

	mu      sync.Mutex
	entries map[string]*poolEntry
	closed  bool // by Close: Get connects nothing
	// logouts are the logouts under way (replaced, forgotten and superseded clients): Close
	// waits for them too.
	logouts inflight
}

// inflight counts background work; idle says when none is left. Unlike a WaitGroup it may gain
// work while someone waits (a connection attempt superseded before Close ends its own way).
type inflight struct {
	mu   sync.Mutex
	n    int
	none chan struct{} // closed when n drops to 0
}

func (f *inflight) Go(work func()) {
	f.mu.Lock()
	if f.n == 0 {
		f.none = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
	go func() {
		defer func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.n--; f.n == 0 {
				close(f.none)
			}
		}()
		work()
	}()
}

// idle is closed once the work under way now (and any started before it ends) is done.
func (f *inflight) idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	return f.none
}

type poolEntry struct {
	mu          sync.Mutex
	fingerprint string
	owner       string // Target.Owner of the client, or of the last connection attempt
	client      *client
	// breaker outlives failed connects and client replacements: a BMC that never answers opens
	// it like one that stopped answering, and Get then fails fast instead of holding a worker.
	breaker *breaker
	// dial is the connection attempt under way, or the failed one whose error the next Get reports.
	dial *dial
	// forgotten is set by Forget: the entry is out of the pool, and a Get or an attempt that still
	// holds it installs nothing in it (a client made then is logged out).
	forgotten bool
}

// dial is one connection attempt: service root, system discovery and login, run off the caller's
// goroutine so that a BMC that hangs holds no reconcile worker for longer than ConnectWait.
type dial struct {
	fingerprint string
	owner       string
	done        chan struct{}
	cancel      context.CancelFunc // stops the attempt (Forget, new credentials)
	client      *client
	err         error
}

// NewPool returns an empty pool whose clients use opts.
func NewPool(opts Options) *Pool {
	return &Pool{opts: opts, entries: map[string]*poolEntry{}}
}

// Get returns the client for t.Address, logged in, connecting on first use or when the
// credentials or TLS settings changed since the client was made. The connection is made in the
// background: when it takes longer than Options.ConnectWait, Get returns ErrConnecting and a later
// Get returns its outcome (the client, or the error once, after which the next Get tries again).
func (p *Pool) Get(ctx context.Context, t Target) (Client, error) {
	fp := fingerprint(t)
	var e *poolEntry
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: the pool is closed (the manager is stopping)", ErrConnecting)
		}
		e = p.entries[t.Address]
		if e == nil {
			e = &poolEntry{breaker: newBreaker(p.opts.withDefaults())}
			p.entries[t.Address] = e
		}
		p.mu.Unlock()
		e.mu.Lock()
		if !e.forgotten {
			break
		}
		e.mu.Unlock() // forgotten since it was looked up: take the pool's current entry
	}
	if e.client != nil && e.fingerprint == fp {
		defer e.mu.Unlock()
		return e.client, nil
	}
	if e.client != nil {
		// Logged out at the address, whoever answers there now (a reassigned IP: the new BMC
		// refuses a token it never issued, and nothing else happens).
		old := e.client
		e.client = nil
		p.logoutSoon(old)
	}
	d := e.dial
	if d != nil && d.fingerprint != fp {
		d.cancel() // made with other credentials: stopped, its outcome discarded
		d, e.dial = nil, nil
	}
	started := d == nil
	if started {
		if e.breaker.open() {
			e.mu.Unlock()
			return nil, ErrCircuitOpen
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.opts.withDefaults().CallTimeout)
		d = &dial{fingerprint: fp, owner: t.Owner, done: make(chan struct{}), cancel: cancel}
		e.dial, e.owner = d, t.Owner
		go p.run(ctx, e, d, t)
	}
	e.mu.Unlock()

	// Only the caller that started the attempt waits for it; the others learn its outcome from
	// d.done without waiting.
	if started {
		wait := time.NewTimer(p.opts.withDefaults().ConnectWait)
		defer wait.Stop()
		select {
		case <-d.done:
		case <-wait.C:
			return nil, ErrConnecting
		case <-ctx.Done():
			return nil, ErrConnecting
		}
	} else {
		select {
		case <-d.done:
		default:
			return nil, ErrConnecting
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case d.err == nil && e.client == d.client:
		return d.client, nil
	case d.err == nil:
		return nil, ErrConnecting // installed, then forgotten or replaced: ask again
	}
	if e.dial == d {
		e.dial = nil // reported: the next Get tries again
	}
	return nil, d.err
}

// run makes the connection of d and installs the client in e, unless e moved on meanwhile
// (forgotten, or new credentials), in which case the client is logged out.
func (p *Pool) run(ctx context.Context, e *poolEntry, d *dial, t Target) {
	defer d.cancel()
	c, err := connect(ctx, t, p.opts, e.breaker)
	if err == nil {
		if err = c.tr.ensureSession(ctx); err != nil {
			c.tr.closeIdle() // a BMC that allows few connections gets them back now
			err = classify(err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	defer close(d.done)
	d.err = err
	if err != nil {
		return
	}
	if e.dial != d || e.forgotten {
		p.logoutSoon(c)
		d.err = ErrConnecting // superseded; the caller asks again
		return
	}
	d.client = c
	e.dial = nil
	e.client, e.fingerprint, e.owner = c, d.fingerprint, d.owner
}

// Forget drops (and logs out) the client of a BMC, whoever owns it (the host controller uses
// ForgetOwned).
func (p *Pool) Forget(address string) {
	p.mu.Lock()
	e, ok := p.entries[address]
	delete(p.entries, address)
	p.mu.Unlock()
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p.forget(e)
}

// ForgetOwned is Forget when the client at address (or the last connection attempt, under way
// or failed) is owner's: a host that vanished without its finalizer gives its BMC session back,
// and leaves alone the client of a host created at that address since.
func (p *Pool) ForgetOwned(address, owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[address]
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.owner != owner {
		return
	}
	delete(p.entries, address)
	p.forget(e)
}

// forget marks e out of the pool and logs out what it holds (e.mu held).
func (p *Pool) forget(e *poolEntry) {
	e.forgotten = true
	if e.dial != nil {
		e.dial.cancel() // an attempt under way stops, and logs out what it made
		e.dial = nil
	}
	if e.client != nil {
		p.logoutSoon(e.client)
		e.client = nil
	}
}

// Close logs out every session the pool holds, waiting for the logouts (and for connection
// attempts under way, which log out what they made) until ctx is done; Get connects nothing
// after. A BMC whose circuit breaker is open (it stopped answering) is not waited for. A manager
// that stops gives the BMCs their sessions back at once instead of leaving them to expire (a BMC
// with a small session table, such as an iDRAC's, would otherwise refuse logins after a few
// restarts in a row).
func (p *Pool) Close(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	entries := p.entries
	p.entries = map[string]*poolEntry{}
	p.mu.Unlock()
	var dials []*dial
	for _, e := range entries {
		e.mu.Lock()
		e.forgotten = true
		if e.dial != nil {
			// Left to finish rather than cancelled in the middle of a login: run logs out
			// what it made.
			dials = append(dials, e.dial)
			e.dial = nil
		}
		if c := e.client; c != nil {
			e.client = nil
			if !e.breaker.open() {
				p.logoutSoon(c)
			}
		}
		e.mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		for _, d := range dials {
			<-d.done // a superseded attempt's logout is started before done closes
		}
		<-p.logouts.idle()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		for _, d := range dials {
			d.cancel()
		}
	}
}

// Len returns how many BMCs the pool holds clients for.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// logoutSoon logs c out in the background (within 10 s), counted in p.logouts.
func (p *Pool) logoutSoon(c *client) {
	p.logouts.Go(func() {
		c.close(10 * time.Second)
		c.tr.closeIdle()
	})
}

// fingerprint identifies the credentials and TLS settings without keeping them in clear.
func fingerprint(t Target) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(t.Username), []byte(t.Password), t.CABundle} {
		h.Write([]byte{byte(len(part) >> 24), byte(len(part) >> 16), byte(len(part) >> 8), byte(len(part))})
		h.Write(part)
	}
	if t.InsecureSkipVerify {
		h.Write([]byte{1})
	}
	if t.BasicAuth {
		h.Write([]byte{2})
	}
	return hex.EncodeToString(h.Sum(nil))
}
