package bmc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"
)

// Pool keeps one Client per BMC address for the life of the manager, so reconciles reuse the
// BMC's Redfish session instead of logging in each time. A client is replaced when the
// credentials or TLS settings for its address change (its old session is logged out).
type Pool struct {
	opts Options

	mu      sync.Mutex
	entries map[string]*poolEntry
}

type poolEntry struct {
	mu          sync.Mutex
	fingerprint string
	client      *client
	// breaker outlives failed connects and client replacements: a BMC that never answers opens
	// it like one that stopped answering, and Get then fails fast instead of holding a worker.
	breaker *breaker
}

// NewPool returns an empty pool whose clients use opts.
func NewPool(opts Options) *Pool {
	return &Pool{opts: opts, entries: map[string]*poolEntry{}}
}

// Get returns the client for t.Address, connecting on first use or when the credentials or TLS
// settings changed since the client was made.
func (p *Pool) Get(ctx context.Context, t Target) (Client, error) {
	p.mu.Lock()
	e, ok := p.entries[t.Address]
	if !ok {
		e = &poolEntry{breaker: newBreaker(p.opts.withDefaults())}
		p.entries[t.Address] = e
	}
	p.mu.Unlock()

	fp := fingerprint(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client != nil && e.fingerprint == fp {
		return e.client, nil
	}
	if e.client != nil {
		old := e.client
		e.client = nil
		go logoutSoon(old)
	}
	if e.breaker.open() {
		return nil, ErrCircuitOpen
	}
	c, err := connect(ctx, t, p.opts, e.breaker)
	if err != nil {
		return nil, err
	}
	e.client, e.fingerprint = c, fp
	return c, nil
}

// Forget drops (and logs out) the client of a BMC, e.g. when its host is deleted.
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
	if e.client != nil {
		go logoutSoon(e.client)
	}
}

// Len returns how many BMCs the pool holds clients for.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

func logoutSoon(c *client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.close(ctx)
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
	return hex.EncodeToString(h.Sum(nil))
}
