package simulator

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// Faults injects failures into one simulated server. The zero value injects nothing; every method
// is safe to call while clients are talking to the server.
type Faults struct {
	mu              sync.Mutex
	errorBurst      int            // next N requests answer errorStatus
	errorStatus     int            //
	latency         time.Duration  // added to every request
	hang            chan struct{}  // non-nil: requests block until closed
	hangLogins      chan struct{}  // non-nil: logins (POST to the session collection) block until closed
	conflicts       int            // next N reset actions answer 409
	unavailableTil  time.Time      // BMC rebooting: 503 until then
	wrongPowerTil   time.Time      // power state reported inverted until then
	drops           map[string]int // method -> next N answers lost after the request was carried out
	pathDrops       []pathDrop     // the same, for requests to one path only
	rejectMedia     int            // next N InsertMedia answer 400 echoing the image URL
	echoUpdateCreds bool           // SimpleUpdate tasks echo the image server's user and password
	pathErrors      []pathError    // next N requests to a path answer an error status
	emptied         []pathError    // next N GETs of a collection answer it empty
	changes         []pathError    // next N PATCHes to a path find the resource changed by another client
	failUpdates     int            // next N firmware updates end Completed with TaskStatus Critical
	answers         []pathAnswer   // next N GETs of a path answer a given document
}

// pathAnswer is a document a BMC answers instead of the resource (see AnswerTo).
type pathAnswer struct {
	suffix string
	n      int
	status int
	body   []byte
}

// AnswerTo makes the next n GETs whose path ends with suffix answer status with body instead of
// the resource, as a BMC firmware that answers a malformed or unexpected document does (the
// fuzz targets of the Redfish JSON the provider reads itself use it).
func (f *Faults) AnswerTo(suffix string, n, status int, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers = append(f.answers, pathAnswer{suffix: suffix, n: n, status: status, body: append([]byte(nil), body...)})
}

// ClearAnswers forgets the answers AnswerTo set that were not given yet.
func (f *Faults) ClearAnswers() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers = nil
}

// FailUpdates makes the next n firmware updates end in TaskState Completed with TaskStatus
// Critical and the firmware unchanged, as BMCs report an image they reject after the transfer.
func (f *Faults) FailUpdates(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failUpdates = n
}

func (f *Faults) takeFailUpdate() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failUpdates > 0 {
		f.failUpdates--
		return true
	}
	return false
}

// ConcurrentChange makes another client change the resource whose path ends with suffix just
// before each of the next n PATCHes to it arrive: a client's ETag read before is then stale.
func (f *Faults) ConcurrentChange(suffix string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = append(f.changes, pathError{suffix: suffix, n: n})
}

func (f *Faults) takeConcurrentChange(path string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.changes {
		if c := &f.changes[i]; c.n > 0 && strings.HasSuffix(strings.TrimSuffix(path, "/"), c.suffix) {
			c.n--
			return true
		}
	}
	return false
}

type pathError struct {
	suffix string
	n      int
	status int
}

// ErrorBurstTo makes the next n requests whose path ends with suffix (e.g. "/VirtualMedia")
// answer status; other requests are answered.
func (f *Faults) ErrorBurstTo(suffix string, n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pathErrors = append(f.pathErrors, pathError{suffix: suffix, n: n, status: status})
}

// EmptyCollectionTo makes the next n GETs whose path ends with suffix answer 200 with a collection
// that has no members, as a collection left behind by a BMC firmware update that moved its
// resources elsewhere does.
func (f *Faults) EmptyCollectionTo(suffix string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.emptied = append(f.emptied, pathError{suffix: suffix, n: n})
}

// RejectMedia makes the next n InsertMedia actions fail with 400 and an error message that
// echoes the rejected image URL, as several BMCs do.
func (f *Faults) RejectMedia(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rejectMedia = n
}

func (f *Faults) takeRejectMedia() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rejectMedia > 0 {
		f.rejectMedia--
		return true
	}
	return false
}

type pathDrop struct {
	method, suffix string
	n              int
}

// DropResponses makes the BMC carry out the next n requests with the given method and then close
// the connection without answering: the client cannot know whether its request took effect.
func (f *Faults) DropResponses(method string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drops == nil {
		f.drops = map[string]int{}
	}
	f.drops[method] = n
}

// DropResponsesTo is DropResponses for requests whose path ends with suffix, e.g.
// "/Actions/ComputerSystem.Reset": only the power action's answer is lost.
func (f *Faults) DropResponsesTo(method, suffix string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pathDrops = append(f.pathDrops, pathDrop{method: method, suffix: suffix, n: n})
}

func (f *Faults) takeDrop(method, path string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.pathDrops {
		if d := &f.pathDrops[i]; d.n > 0 && d.method == method && strings.HasSuffix(path, d.suffix) {
			d.n--
			return true
		}
	}
	if f.drops[method] > 0 {
		f.drops[method]--
		return true
	}
	return false
}

// ErrorBurst makes the next n requests fail with status (e.g. 500, 503).
func (f *Faults) ErrorBurst(n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errorBurst, f.errorStatus = n, status
}

// Latency adds d to every request (0 removes it).
func (f *Faults) Latency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// Hang makes every request block without an answer until Unhang (or the client gives up).
func (f *Faults) Hang() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hang == nil {
		f.hang = make(chan struct{})
	}
}

// HangLogins makes every login (POST to the session collection) block without an answer until
// Unhang (or the client gives up), as a BMC whose web server answers but whose session service
// is stuck does; every other request is answered.
func (f *Faults) HangLogins() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hangLogins == nil {
		f.hangLogins = make(chan struct{})
	}
}

// Unhang releases hanging requests and stops hanging new ones.
func (f *Faults) Unhang() { f.clearHang() }

func (f *Faults) clearHang() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range []*chan struct{}{&f.hang, &f.hangLogins} {
		if *c != nil {
			close(*c)
			*c = nil
		}
	}
}

// Conflicts makes the next n ComputerSystem.Reset actions answer 409 Conflict.
func (f *Faults) Conflicts(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conflicts = n
}

// WrongPowerState makes the system report the opposite power state for d.
func (f *Faults) WrongPowerState(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wrongPowerTil = time.Now().Add(d)
}

func (f *Faults) powerInverted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Now().Before(f.wrongPowerTil)
}

func (f *Faults) takeConflict() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conflicts > 0 {
		f.conflicts--
		return true
	}
	return false
}

func (f *Faults) setUnavailable(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unavailableTil = time.Now().Add(d)
}

// intercept applies the request-level faults; true means the request was answered.
func (f *Faults) intercept(w http.ResponseWriter, r *http.Request) bool {
	f.mu.Lock()
	latency, hang := f.latency, f.hang
	if hang == nil && r.Method == http.MethodPost && strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/Sessions") {
		hang = f.hangLogins
	}
	unavailable := time.Now().Before(f.unavailableTil)
	burst := f.errorBurst > 0
	status := f.errorStatus
	if burst {
		f.errorBurst--
	}
	for i := range f.pathErrors {
		if e := &f.pathErrors[i]; !burst && e.n > 0 && strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), e.suffix) {
			e.n--
			burst, status = true, e.status
		}
	}
	empty := false
	for i := range f.emptied {
		if e := &f.emptied[i]; !burst && !empty && r.Method == http.MethodGet && e.n > 0 && strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), e.suffix) {
			e.n--
			empty = true
		}
	}
	var answer *pathAnswer
	for i := range f.answers {
		if a := &f.answers[i]; !burst && !empty && answer == nil && r.Method == http.MethodGet && a.n > 0 && strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), a.suffix) {
			a.n--
			answer = &pathAnswer{status: a.status, body: a.body}
		}
	}
	f.mu.Unlock()

	if hang != nil {
		select {
		case <-hang:
		case <-r.Context().Done():
			return true
		}
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return true
		}
	}
	switch {
	case unavailable:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "Base.1.8.ServiceTemporarilyUnavailable", "The BMC is restarting.")
		return true
	case burst:
		writeError(w, status, "Base.1.8.InternalError", "Injected fault.")
		return true
	case answer != nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(answer.status)
		_, _ = w.Write(answer.body)
		return true
	case empty:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"@odata.id":"` + strings.TrimSuffix(r.URL.Path, "/") + `","Name":"Collection","Members":[],"Members@odata.count":0}`))
		return true
	}
	return false
}

// EchoUpdateCredentials makes the tasks of later SimpleUpdates echo the image server's user name
// and password in their messages, as some BMCs echo a request's parameters.
func (f *Faults) EchoUpdateCredentials() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.echoUpdateCreds = true
}

func (f *Faults) echoesUpdateCredentials() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.echoUpdateCreds
}
