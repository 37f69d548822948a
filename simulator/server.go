package simulator

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config describes one simulated server.
type Config struct {
	// ID names the server (also used for serial numbers and MACs). Required.
	ID string
	// Index makes MAC addresses and UUIDs unique across a fleet.
	Index int
	// Fleet makes MAC addresses and UUIDs unique across fleets: servers of two fleets with
	// different Fleet numbers never share an identity. 0 for a single fleet.
	Fleet uint16
	// Username and Password the BMC accepts. Defaults: admin / password.
	Username, Password string
	// PowerLatency is how long a power transition takes. Default 0 (immediate, but still async).
	PowerLatency time.Duration
	// POSTDuration is how long the power-on self test runs once a power-on completes: a staged
	// BIOS image and staged BIOS settings are written during it, so a server powered off before
	// it ends keeps them staged. Default PowerLatency.
	POSTDuration time.Duration
	// TaskDuration is how long a firmware update task runs. Default 2s.
	TaskDuration time.Duration
	// EraseDuration is how long a drive's SecureErase runs: the BMC answers 202 with a task
	// monitor and the drive counts as erased when the task completes. Default 250ms.
	EraseDuration time.Duration
	// IPXEChainURL is where a network-booting server fetches its iPXE script, <url>/<boot MAC>
	// (what DHCP and a chain-loaded iPXE do on a real network). Empty: PXE boots find nothing.
	IPXEChainURL string
	// FirmwareRootCAs are the certificates the server's firmware trusts for an HTTPS network boot
	// (what an operator enrols, or builds into iPXE); nil: the system's.
	FirmwareRootCAs *x509.CertPool
	// SingleMediaSlot models BMCs with one virtual media device (a CD) instead of a CD and a USB
	// stick.
	SingleMediaSlot bool
	// NoSecureErase models BMCs that offer no drive erase (e.g. drives only behind
	// SimpleStorage): drives carry no Drive.SecureErase action and the action answers 404.
	NoSecureErase bool
	// NoSecureEraseDrives lists drives (Disk0, Disk1) that carry no Drive.SecureErase action
	// while the others do, as a controller that erases its SSDs but not a drive behind another
	// HBA.
	NoSecureEraseDrives []string
	// EmptyBays adds that many drive bays with no drive in them (Status.State Absent, no
	// serial, no actions) to the Storage's Drives, as BMCs list a chassis' empty slots.
	EmptyBays int
	// EraseWithoutMonitor answers a SecureErase with 202 and neither a task monitor nor a task:
	// only the drive's Operations tell that the erase still runs.
	EraseWithoutMonitor bool
	// ShutdownDuration is how long the OS takes to shut down after a GracefulShutdown (the power
	// button pressed): the power reads On meanwhile, as on a real server. Default PowerLatency.
	ShutdownDuration time.Duration
	// SessionTimeout expires idle sessions. Default 30 minutes.
	SessionTimeout time.Duration
	// TLS serves HTTPS with a self-signed certificate instead of HTTP.
	TLS bool
	// PoweredOn starts the server powered on.
	PoweredOn bool
	// Profile is the BMC's shape (see Profiles). Zero: the DMTF-like default.
	Profile Profile
	// Listen is the TCP address to serve on. Default 127.0.0.1:0 (a free port). A test gives a
	// stopped server's host:port to put another BMC at its address, as a reassigned IP does.
	Listen string
}

// Server is one simulated BMC with the system it manages.
type Server struct {
	cfg   Config
	srv   *httptest.Server
	Fault *Faults

	mu               sync.Mutex
	state            systemState
	sessions         map[string]*session // token -> session
	revisions        map[string]int      // path -> changes made by other clients (see Faults.ConcurrentChange)
	blades           map[int]string      // power state of the other systems of a bladed BMC
	nextID           int
	tasks            map[string]*task
	pushing          bool // an image is being pushed to the MultipartHttpPushUri
	stats            Stats
	inFlight         int
	observers        []func(BootEvent)
	requestObservers []func(Request)
	closed           bool
	diskDir          string // holds the drives' files (see Drives)
	caPEM            []byte // the CA of the TLS certificate (TLS only)
}

type session struct {
	id       string
	created  time.Time
	lastUsed time.Time
	requests int // authenticated with it
}

// SessionInfo describes one open session, for a test that finds more open than it expected.
type SessionInfo struct {
	ID                string
	Created, LastUsed time.Time
	Requests          int // authenticated with it
}

// Sessions lists the sessions the BMC holds, oldest first.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SessionInfo, 0, len(s.sessions))
	for _, sess := range s.sessions {
		out = append(out, SessionInfo{ID: sess.id, Created: sess.created, LastUsed: sess.lastUsed, Requests: sess.requests})
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return a.Created.Compare(b.Created) })
	return out
}

// Stats counts what clients did to a server.
type Stats struct {
	// Requests by HTTP method (authenticated and not, faults included).
	Requests map[string]int
	// SessionsCreated counts successful logins through the SessionService.
	SessionsCreated int
	// Resets by ResetType, as accepted (202/204), not including rejected ones.
	Resets map[string]int
	// SimpleUpdates counts accepted firmware updates.
	SimpleUpdates int
	// Boots counts power-on boots of the system.
	Boots int
	// PeakInFlight is the most requests the server was handling at once.
	PeakInFlight int
	// IfMatchOnActions counts action POSTs that carried If-Match (refused with 412 by profiles
	// with ActionsRefuseIfMatch).
	IfMatchOnActions int
	// UpdatesRefusedBusy counts firmware update requests refused (409) because an update was
	// running or an image was being pushed: two clients flashing one BMC at once.
	UpdatesRefusedBusy int
	// UpdatesInterrupted counts accepted firmware updates whose task the BMC's own reset ended in
	// Exception (ResetBMC): the image was never staged, and a client may send it again.
	UpdatesInterrupted int
	// UpdatesCompleted counts firmware update tasks that ended Completed with the image accepted
	// (staged, or applied for the BMC's own firmware).
	UpdatesCompleted int
	// ResetsDuringUpdate counts ComputerSystem.Reset requests accepted while a firmware update ran
	// or an image was being pushed (a boot into the BIOS setup in the middle of a flash).
	ResetsDuringUpdate int
	// PushedBytes counts the bytes of firmware images pushed to the MultipartHttpPushUri.
	PushedBytes int64
	// TLSHandshakeFailures counts the TLS handshakes that failed, such as those of a client that
	// does not trust the server's certificate (a real BMC logs them too).
	TLSHandshakeFailures int
	// ImageUsers lists, per SimpleUpdate, the Username it gave for the image server ("" for none).
	ImageUsers []string
	// StaleIfMatch counts PATCHes refused with 412 because their If-Match was stale.
	StaleIfMatch int
	// Gets counts the GET requests by path (authenticated and not, faults included).
	Gets map[string]int
	// Posts counts the POST requests carried out (answered 2xx, or carried out and the answer
	// lost) by path: actions, logins, pushes. Refused ones are not counted.
	Posts map[string]int
}

// New starts a simulated server on a loopback port.
func New(cfg Config) (*Server, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("simulator: server ID is required")
	}
	if err := cfg.Profile.validate(); err != nil {
		return nil, err
	}
	if cfg.Profile.Name == "" {
		cfg.Profile.Name = "dmtf" // the zero profile
	}
	if cfg.Username == "" {
		cfg.Username = "admin"
	}
	if cfg.Password == "" {
		cfg.Password = "password"
	}
	if cfg.TaskDuration == 0 {
		cfg.TaskDuration = 2 * time.Second
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 30 * time.Minute
	}
	if cfg.EraseDuration == 0 {
		cfg.EraseDuration = 250 * time.Millisecond
	}
	s := &Server{
		cfg:       cfg,
		Fault:     &Faults{},
		sessions:  map[string]*session{},
		revisions: map[string]int{},
		blades:    map[int]string{},
		tasks:     map[string]*task{},
		state:     newSystemState(cfg),
		stats:     Stats{Requests: map[string]int{}, Resets: map[string]int{}, Posts: map[string]int{}, Gets: map[string]int{}},
	}
	s.srv = httptest.NewUnstartedServer(s.handler())
	s.srv.Config.ErrorLog = log.New(handshakeCounter{s}, "", 0)
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	s.srv.Listener = l
	if cfg.TLS {
		cert, ca, err := bmcCertificate(cfg.ID)
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		s.caPEM = ca
		s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	return s, nil
}

// Close stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.removeDrives()
	s.mu.Unlock()
	s.Fault.clearHang()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Profile returns the BMC profile the server simulates.
func (s *Server) Profile() Profile { return s.cfg.Profile }

// ID returns the server's ID.
func (s *Server) ID() string { return s.cfg.ID }

// URL is the base URL of the service (http://127.0.0.1:port or https://…).
func (s *Server) URL() string { return s.srv.URL }

// SystemPath is the Redfish path of the managed system.
func (s *Server) SystemPath() string { return systemPath }

// Address is the BMC address in the form RedfishHost.spec.bmc.address takes.
func (s *Server) Address() string {
	hostport := strings.TrimPrefix(strings.TrimPrefix(s.srv.URL, "https://"), "http://")
	scheme := "redfish+http"
	if s.cfg.TLS {
		scheme = "redfish"
	}
	return scheme + "://" + hostport + systemPath
}

// Credentials returns the username and password the BMC accepts.
func (s *Server) Credentials() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Username, s.cfg.Password
}

// CACertPEM returns the PEM certificate of the CA that signed a TLS server's certificate, its own
// (nil for HTTP).
func (s *Server) CACertPEM() []byte { return s.caPEM }

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{Requests: map[string]int{}, Resets: map[string]int{}, Posts: map[string]int{}, Gets: map[string]int{},
		SessionsCreated: s.stats.SessionsCreated, SimpleUpdates: s.stats.SimpleUpdates, Boots: s.stats.Boots,
		PeakInFlight: s.stats.PeakInFlight, IfMatchOnActions: s.stats.IfMatchOnActions, StaleIfMatch: s.stats.StaleIfMatch, PushedBytes: s.stats.PushedBytes,
		UpdatesRefusedBusy: s.stats.UpdatesRefusedBusy, UpdatesInterrupted: s.stats.UpdatesInterrupted, UpdatesCompleted: s.stats.UpdatesCompleted, ResetsDuringUpdate: s.stats.ResetsDuringUpdate, TLSHandshakeFailures: s.stats.TLSHandshakeFailures,
		ImageUsers: append([]string(nil), s.stats.ImageUsers...)}
	for k, v := range s.stats.Posts {
		out.Posts[k] = v
	}
	for k, v := range s.stats.Gets {
		out.Gets[k] = v
	}
	for k, v := range s.stats.Requests {
		out.Requests[k] = v
	}
	for k, v := range s.stats.Resets {
		out.Resets[k] = v
	}
	return out
}

// Request is a request the BMC received, as its own request log could keep it.
type Request struct {
	Method, Path string
	Header       http.Header // without Authorization and X-Auth-Token
	Body         []byte      // the first MiB
	// Status is the HTTP status answered, or for an answer a fault dropped (Dropped) the one the
	// request was carried out with; 0 when the handling ended without one (a hang the client gave
	// up on).
	Status int
	// Dropped says the request was carried out and its answer lost (Faults.DropResponses).
	Dropped bool
	// Received and Answered are when the request arrived and when its handling ended.
	Received, Answered time.Time
}

// OnRequest registers an observer called with every request once it was handled (the secrets
// sweep of the e2e suite reads what the provider sends its BMCs).
func (s *Server) OnRequest(f func(Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requestObservers = append(s.requestObservers, f)
}

// handshakeCounter is the HTTP server's error log: it counts failed TLS handshakes, and passes
// every other line (a handler's panic) on to the standard logger.
type handshakeCounter struct{ s *Server }

func (h handshakeCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("TLS handshake error")) {
		h.s.mu.Lock()
		h.s.stats.TLSHandshakeFailures++
		h.s.mu.Unlock()
		return len(p), nil
	}
	return log.Writer().Write(p)
}

// Hijack hands the connection over (a fault that drops the answer closes it).
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be taken over")
	}
	return hj.Hijack()
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// ActiveSessions returns how many sessions the BMC holds.
func (s *Server) ActiveSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// handler wraps the Redfish routes with request counting, fault injection and authentication.
func (s *Server) handler() http.Handler {
	mux := s.withETags(s.routes())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		requestObservers := s.requestObservers
		s.mu.Unlock()
		var sw *statusRecorder // the request log's view of the answer, with observers
		if len(requestObservers) > 0 {
			// What a BMC's own request log could keep, once the request was handled: method,
			// path, headers (credentials headers left out) and the first MiB of the body it read
			// (copied as the handler reads it: serving is not changed).
			body := &cappedBuffer{max: 1 << 20}
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(r.Body, body), r.Body}
			header := r.Header.Clone()
			header.Del("Authorization")
			header.Del("X-Auth-Token")
			sw = &statusRecorder{ResponseWriter: w}
			w = sw
			received := time.Now()
			defer func() {
				for _, f := range requestObservers {
					f(Request{Method: r.Method, Path: r.URL.RequestURI(), Header: header, Body: body.Bytes(), Status: sw.status, Dropped: sw.dropped, Received: received, Answered: time.Now()})
				}
			}()
		}
		s.mu.Lock()
		s.stats.Requests[r.Method]++
		if r.Method == http.MethodGet {
			s.stats.Gets[strings.TrimSuffix(r.URL.Path, "/")]++
		}
		s.inFlight++
		s.stats.PeakInFlight = max(s.stats.PeakInFlight, s.inFlight)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
		}()

		if s.Fault.intercept(w, r) {
			return
		}
		if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/Actions/") && r.Header.Get("If-Match") != "" {
			s.mu.Lock()
			s.stats.IfMatchOnActions++
			s.mu.Unlock()
			if s.cfg.Profile.ActionsRefuseIfMatch {
				writeError(w, http.StatusPreconditionFailed, "Base.1.8.PreconditionFailed", "The ETag supplied did not match the ETag required to change this resource.")
				return
			}
		}
		if s.cfg.Profile.PatchRequiresIfMatch && r.Method == http.MethodPatch && r.Header.Get("If-Match") == "" {
			writeError(w, http.StatusPreconditionRequired, "Base.1.8.PreconditionRequired", "A precondition header or annotation is required to change this resource.")
			return
		}
		if !s.public(r) && !s.authenticate(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="redfish"`)
			writeError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "There is no valid session established with the implementation.")
			return
		}
		w.Header().Set("OData-Version", "4.0")
		orig := w // the connection to close when an answer is lost
		if r.Method == http.MethodPost {
			rec := &statusRecorder{ResponseWriter: w}
			defer func(path string) {
				if rec.status < 300 {
					s.mu.Lock()
					s.stats.Posts[path]++
					s.mu.Unlock()
				}
			}(r.URL.Path)
			w = rec
		}
		if s.Fault.takeDrop(r.Method, r.URL.Path) {
			lost := httptest.NewRecorder()
			mux.ServeHTTP(lost, r) // carried out, answer lost
			if sw != nil {
				sw.status, sw.dropped = lost.Code, true
			}
			if hj, ok := orig.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
				}
			}
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// public lists what Redfish allows without authentication: the service root, $metadata, odata
// and creating a session.
func (s *Server) public(r *http.Request) bool {
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/redfish", rootPath, rootPath + "/odata", rootPath + "/$metadata":
		return r.Method == http.MethodGet
	case s.cfg.Profile.sessionsPath():
		return r.Method == http.MethodPost
	}
	return false
}

func (s *Server) authenticate(r *http.Request) bool {
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		sess, ok := s.sessions[tok]
		if !ok {
			return false
		}
		if time.Since(sess.lastUsed) > s.cfg.SessionTimeout {
			delete(s.sessions, tok)
			return false
		}
		sess.lastUsed = time.Now()
		sess.requests++
		return true
	}
	user, pass, ok := r.BasicAuth()
	return ok && s.checkPassword(user, pass)
}

func (s *Server) checkPassword(user, pass string) bool {
	wantUser, wantPass := s.Credentials()
	return subtle.ConstantTimeCompare([]byte(user), []byte(wantUser)) == 1 &&
		subtle.ConstantTimeCompare([]byte(pass), []byte(wantPass)) == 1
}

// SetPassword changes the password the BMC accepts and ends every session, as an administrator
// rotating it does.
func (s *Server) SetPassword(password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.Password = password
	s.sessions = map[string]*session{}
}

// HoldSessions opens n sessions as other clients (a monitoring agent, a person's browser) would,
// for a profile with a session limit to run out.
func (s *Server) HoldSessions(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.nextID++
		s.sessions[randomHex(16)] = &session{id: fmt.Sprintf("%d", s.nextID), lastUsed: time.Now().Add(time.Hour)}
	}
}

// ExpireSessions drops every session, as a BMC does when sessions time out or it restarts.
func (s *Server) ExpireSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = map[string]*session{}
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var body struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body is not valid JSON.")
		return
	}
	if !s.checkPassword(body.UserName, body.Password) {
		writeError(w, http.StatusUnauthorized, "Base.1.8.ResourceAtUriUnauthorized", "Invalid username or password.")
		return
	}
	tok := randomHex(16)
	s.mu.Lock()
	if max := s.cfg.Profile.MaxSessions; max > 0 && len(s.sessions) >= max {
		s.mu.Unlock()
		if s.cfg.Profile.SessionLimitIDRAC {
			writeError(w, http.StatusServiceUnavailable, "IDRAC.2.8.RAC0218", "The maximum number of user sessions is reached.")
			return
		}
		writeError(w, http.StatusServiceUnavailable, "Base.1.8.SessionLimitExceeded",
			"The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.")
		return
	}
	s.nextID++
	id := fmt.Sprintf("%d", s.nextID)
	now := time.Now()
	s.sessions[tok] = &session{id: id, created: now, lastUsed: now}
	s.stats.SessionsCreated++
	s.mu.Unlock()
	loc := s.cfg.Profile.sessionsPath() + "/" + id
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusCreated, map[string]any{
		"@odata.id": loc, "@odata.type": "#Session.v1_6_0.Session", "Id": id, "Name": "User Session",
		"UserName": body.UserName,
	})
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok, sess := range s.sessions {
		if sess.id == id {
			delete(s.sessions, tok)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "No such session.")
}

func (s *Server) sessionCollection(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	members := make([]any, 0, len(s.sessions))
	for _, sess := range s.sessions {
		members = append(members, link(s.cfg.Profile.sessionsPath()+"/"+sess.id))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, collection(s.cfg.Profile.sessionsPath(), "#SessionCollection.SessionCollection", "Sessions", members))
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sess := range s.sessions {
		if sess.id == id {
			writeJSON(w, http.StatusOK, map[string]any{
				"@odata.id": s.cfg.Profile.sessionsPath() + "/" + id, "@odata.type": "#Session.v1_6_0.Session", "Id": id,
				"Name": "User Session", "UserName": s.cfg.Username,
			})
			return
		}
	}
	writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "No such session.")
}

// after runs f after d, under the server lock, unless the server was closed by then.
func (s *Server) after(d time.Duration, f func()) {
	time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			f()
		}
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes a Redfish error body (the Base message registry shape).
func writeError(w http.ResponseWriter, code int, msgID, msg string) {
	writeErrorAbout(w, code, msgID, msg)
}

// writeErrorAbout is writeError naming the properties concerned (RelatedProperties, JSON pointers).
func writeErrorAbout(w http.ResponseWriter, code int, msgID, msg string, related ...string) {
	info := map[string]any{"@odata.type": "#Message.v1_1_1.Message", "MessageId": msgID, "Message": msg, "Severity": "Warning"}
	if len(related) > 0 {
		info["RelatedProperties"] = related
	}
	writeJSON(w, code, map[string]any{"error": map[string]any{
		"code": msgID, "message": msg, "@Message.ExtendedInfo": []any{info},
	}})
}

// statusRecorder remembers the status a handler answered (200 when it only wrote a body), and
// whether a fault dropped the answer.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	dropped bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
