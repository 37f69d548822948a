package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// transport is the http.RoundTripper under gofish for one BMC. It owns what makes talking to a
// BMC safe at scale: a Redfish session (X-Auth-Token) created once and renewed when the BMC drops
// it, a limit on concurrent requests, a timeout per attempt, retries with backoff only for
// idempotent methods, and a circuit breaker. A POST (reset, firmware update, login) is never
// resent after it may have reached the BMC: only a 401, which means it was refused unexecuted,
// is retried once after logging in again.
type transport struct {
	base     http.RoundTripper
	baseURL  string
	username string
	password string
	opts     Options

	sem     chan struct{}
	breaker *breaker

	loginMu    sync.Mutex // serialises logins; never held while mu is wanted by the login itself
	mu         sync.Mutex
	token      string
	sessionURI string
	stale      string // URI of a session the BMC refused, deleted once the new one exists
	closed     bool   // logged out for good (the pool replaced or dropped the client): no new session
	sessions   string // the session collection (service root Links.Sessions); "" before it was read
	basicAuth  bool   // the BMC has no SessionService: fall back to HTTP Basic

	requests atomic.Int64
	logins   atomic.Int64
}

// defaultSessionsPath is where most BMCs keep the session collection; the service root's
// Links.Sessions says where this one does.
const defaultSessionsPath = "/redfish/v1/SessionService/Sessions"

func newTransport(base http.RoundTripper, baseURL, username, password string, opts Options, br *breaker) *transport {
	return &transport{
		base: base, baseURL: baseURL, username: username, password: password, opts: opts,
		sem:     make(chan struct{}, opts.MaxConcurrentRequests),
		breaker: br,
	}
}

func newBreaker(opts Options) *breaker {
	return &breaker{threshold: opts.BreakerThreshold, cooldown: opts.BreakerCooldown}
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ok, probe := t.breaker.allow()
	if !ok {
		return nil, ErrCircuitOpen
	}
	// A probe that ends without an answer to record (a client logged out meanwhile, a body that
	// could not be read, a cancelled context) hands the half-open state back.
	defer t.breaker.release(probe)
	if req.Context().Value(streamKey{}) != nil {
		return t.stream(req)
	}
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
	}
	public := req.Method == http.MethodGet && (req.URL.Path == "/redfish/v1" || req.URL.Path == "/redfish/v1/")

	reauthed := false
	for attempt := 0; ; attempt++ {
		if !public {
			if err := t.ensureSession(req.Context()); err != nil {
				return nil, err
			}
		}
		resp, used, err := t.attempt(req, body, !public)
		t.recordAnswer(resp, err)
		if err == nil && resp.StatusCode == http.StatusUnauthorized && !public && !reauthed && used != "" {
			// The session expired or the BMC restarted: the request was refused, not executed.
			// (Not with Basic credentials: sending the same ones again is one more failed login
			// towards the account's lockout.)
			drain(resp)
			t.dropSession(used)
			reauthed = true
			attempt--
			continue
		}
		// A certificate not trusted is the same at every try (only a new CA bundle, which makes a
		// new connection, changes that): not retried, nor left to open the breaker.
		retryable := (err != nil && !tlsVerification(err)) || (err == nil && resp.StatusCode >= 500)
		if !retryable || !idempotent(req.Method) || attempt >= t.opts.Retries || req.Context().Err() != nil {
			return resp, err
		}
		// A retry is one more call the breaker must allow: once the failures opened it (or a
		// half-open probe failed), the rest of the retry budget is not spent on a dead BMC.
		ok, probe := t.breaker.allow()
		if !ok {
			if resp != nil {
				drain(resp)
			}
			return nil, ErrCircuitOpen
		}
		defer t.breaker.release(probe)
		if resp != nil {
			drain(resp)
		}
		if err := sleep(req.Context(), t.opts.Backoff<<attempt); err != nil {
			return nil, err
		}
	}
}

// attempt sends one try, bounded by the per-BMC concurrency limit and the per-attempt timeout.
// It returns the session token it sent ("" for none).
func (t *transport) attempt(orig *http.Request, body []byte, authorize bool) (*http.Response, string, error) {
	ctx := orig.Context()
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	timeout := t.opts.AttemptTimeout
	if d, ok := ctx.Value(attemptTimeoutKey{}).(time.Duration); ok && d > timeout {
		timeout = d // a firmware push: one long request
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	req := orig.Clone(ctx)
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	if t.opts.UserAgent != "" {
		req.Header.Set("User-Agent", t.opts.UserAgent)
	}
	used := ""
	if authorize && sameHost(req.URL, t.baseURL) { // never credentials to another host a redirect names
		used = t.authorize(req)
	}
	t.requests.Add(1)
	start := time.Now()
	resp, err := t.base.RoundTrip(req)
	<-t.sem
	if t.opts.Observe != nil {
		status := 0
		if err == nil {
			status = resp.StatusCode
		}
		t.opts.Observe(t.baseURL, orig.Method, status, time.Since(start))
	}
	if err != nil {
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && orig.Context().Err() == nil {
			return nil, used, fmt.Errorf("%s %s: no answer within %s: %w", orig.Method, orig.URL.Path, timeout, err)
		}
		return nil, used, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, used, nil
}

// authorize sets the session token (or Basic credentials) and returns the token it set.
func (t *transport) authorize(req *http.Request) string {
	req.Header.Del("Authorization")
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.token != "":
		req.Header.Set("X-Auth-Token", t.token)
	case t.basicAuth:
		req.SetBasicAuth(t.username, t.password)
	}
	return t.token
}

// ensureSession logs in once; concurrent callers wait for the same login.
func (t *transport) ensureSession(ctx context.Context) error {
	if t.hasAuth() {
		return nil
	}
	t.loginMu.Lock()
	defer t.loginMu.Unlock()
	if t.hasAuth() {
		return nil
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		// A reconcile still holding a client the pool replaced or dropped would open a session
		// nobody logs out: it asks the pool again instead.
		return fmt.Errorf("%w: this BMC client was logged out (replaced or dropped)", ErrConnecting)
	}
	payload, _ := json.Marshal(map[string]string{"UserName": t.username, "Password": t.password})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.baseURL+t.sessionsPath(), bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, _, err := t.attempt(req, payload, false)
	t.recordAnswer(resp, err)
	if err != nil {
		return fmt.Errorf("creating a Redfish session: %w", err)
	}
	defer drain(resp)
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return ErrAuth
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		t.mu.Lock()
		t.basicAuth = true // no SessionService: every request carries Basic credentials
		t.mu.Unlock()
		return nil
	case resp.StatusCode >= 300:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if sessionLimit(body) {
			t.breaker.record(true) // the BMC answered: a full session table is not an outage
			return ErrSessionLimit
		}
		return fmt.Errorf("creating a Redfish session: HTTP %d: %s", resp.StatusCode, Redact(errorMessage(body)))
	}
	t.mu.Lock()
	t.token = resp.Header.Get("X-Auth-Token")
	t.sessionURI = resp.Header.Get("Location")
	if t.token == "" {
		t.basicAuth = true
	}
	stale := t.stale
	t.stale = ""
	t.mu.Unlock()
	t.logins.Add(1)
	if stale != "" {
		// The BMC refused that session (expired, or the BMC restarted): delete it with the new one,
		// so BMCs that allow few sessions do not keep it.
		go t.deleteSession(stale)
	}
	return nil
}

// closeIdle closes the idle connections to the BMC (after a failed login, or a logout).
func (t *transport) closeIdle() {
	if ci, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func (t *transport) sessionsPath() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sessions == "" {
		return defaultSessionsPath
	}
	return t.sessions
}

// setSessionsPath records the session collection the service root names.
func (t *transport) setSessionsPath(p string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sessions = p
}

func (t *transport) hasAuth() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.token != "" || t.basicAuth
}

// dropSession forgets the session whose token a refused request carried, unless another request
// already replaced it: a late 401 must not wipe the session a sibling just created.
func (t *transport) dropSession(refused string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if refused == "" || t.token != refused {
		return
	}
	t.stale = t.sessionURI
	t.token, t.sessionURI = "", ""
}

// deleteSession deletes a session by URI, best effort.
func (t *transport) deleteSession(uri string) {
	ctx, cancel := context.WithTimeout(context.Background(), t.opts.AttemptTimeout)
	defer cancel()
	if uri[0] == '/' {
		uri = t.baseURL + uri
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, uri, nil)
	if err != nil {
		return
	}
	if resp, _, err := t.attempt(req, nil, true); err == nil {
		drain(resp)
	}
}

// logout deletes the session on the BMC, best effort, within d from when a login under way has
// ended (none starts after).
func (t *transport) logout(d time.Duration) {
	t.loginMu.Lock()
	defer t.loginMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	t.mu.Lock()
	t.closed = true
	uri := t.sessionURI
	t.mu.Unlock()
	if uri == "" {
		return
	}
	if uri[0] == '/' {
		uri = t.baseURL + uri
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, uri, nil)
	if err == nil {
		if resp, _, err := t.attempt(req, nil, true); err == nil {
			drain(resp)
		}
	}
	t.mu.Lock()
	t.token, t.sessionURI = "", ""
	t.mu.Unlock()
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// breaker opens after threshold consecutive failures (no answer, or 5xx) and then fails calls
// fast for cooldown; after that one call at a time may probe, and a success closes it. A probe
// always ends: with its answer recorded, or released by the call that took it.
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu       sync.Mutex
	failures int
	openTil  time.Time
	probing  uint64 // the probe under way (0: none)
	probes   uint64 // probes handed out
}

// allow says whether a call may go; probe is non-zero when the call is the half-open probe, and
// must then be released once the call ended (release after record is a no-op).
func (b *breaker) allow() (ok bool, probe uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures < b.threshold {
		return true, 0
	}
	if time.Now().Before(b.openTil) || b.probing != 0 {
		return false, 0
	}
	b.probes++
	b.probing = b.probes
	return true, b.probing
}

// release ends probe if no answer was recorded for it: the next call may probe.
func (b *breaker) release(probe uint64) {
	if probe == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probing == probe {
		b.probing = 0
	}
}

func (b *breaker) record(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = 0
	if ok {
		b.failures = 0
		return
	}
	b.failures++
	if b.failures >= b.threshold {
		b.openTil = time.Now().Add(b.cooldown)
	}
}

func (b *breaker) open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures >= b.threshold && time.Now().Before(b.openTil)
}

// attemptTimeoutKey carries, in a request's context, a longer bound for its single attempt.
type attemptTimeoutKey struct{}

// sessionLimit recognises a BMC refusing a login because its session table is full: the DMTF
// Base registry's SessionLimitExceeded, and iDRAC's own RAC0218 ("The maximum number of user
// sessions is reached").
func sessionLimit(body []byte) bool {
	for _, marker := range []string{"SessionLimitExceeded", "RAC0218", "maximum number of user sessions", "maximum number of sessions"} {
		if bytes.Contains(bytes.ToLower(body), bytes.ToLower([]byte(marker))) {
			return true
		}
	}
	return false
}

// errorMessage is the message of a Redfish error body, or the start of the body.
func errorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Info    []struct {
				Message string
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil {
		if len(e.Error.Info) > 0 && e.Error.Info[0].Message != "" {
			return e.Error.Info[0].Message
		}
		if e.Error.Message != "" {
			return e.Error.Message
		}
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return string(bytes.TrimSpace(body))
}

// sameHost says whether u is on the BMC's own scheme, host and port.
func sameHost(u *url.URL, baseURL string) bool {
	b, err := url.Parse(baseURL)
	return err == nil && u.Scheme == b.Scheme && u.Host == b.Host
}

// streamKey marks, in a request's context, a request whose body is streamed (a firmware push):
// it is sent once, as it comes, never read into memory nor resent.
type streamKey struct{}

// stream sends a streamed request: logged in first, one attempt, no retry (its body cannot be
// read again), bounded by the context's attempt timeout.
func (t *transport) stream(req *http.Request) (*http.Response, error) {
	if err := t.ensureSession(req.Context()); err != nil {
		return nil, err
	}
	resp, _, err := t.attempt(req, nil, true)
	t.recordAnswer(resp, err)
	return resp, err
}

// recordAnswer tells the breaker whether the BMC answered a request. A certificate not trusted is
// a matter of configuration, not of the BMC's health: not counted.
func (t *transport) recordAnswer(resp *http.Response, err error) {
	if !tlsVerification(err) {
		t.breaker.record(err == nil && resp.StatusCode < 500)
	}
}
