package bmc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

func TestReadsRideOutA5xxBurst(t *testing.T) {
	for _, status := range []int{500, 503} {
		s := newSim(t, simulator.Config{})
		c := connectTo(t, s, fastOpts)
		ctx := context.Background()
		if _, err := c.PowerState(ctx); err != nil {
			t.Fatal(err)
		}
		before := s.Stats().Requests["GET"]
		s.Fault.ErrorBurst(2, status)
		if _, err := c.PowerState(ctx); err != nil {
			t.Fatalf("HTTP %d burst of 2 within 3 retries: %v", status, err)
		}
		if got := s.Stats().Requests["GET"] - before; got != 3 {
			t.Errorf("HTTP %d: GETs sent = %d, want 3 (two failed, one retried successfully)", status, got)
		}
	}
}

func TestPowerOffIsNeverResentByARetry(t *testing.T) {
	s := newSim(t, simulator.Config{PoweredOn: true})
	c := connectTo(t, s, fastOpts)
	ctx := context.Background()
	if _, err := c.PowerState(ctx); err != nil {
		t.Fatal(err)
	}

	// The reset POST fails with 500: it must be reported, not retried.
	sys, err := c.system(ctx)
	if err != nil {
		t.Fatal(err)
	}
	posts := s.Stats().Requests["POST"]
	s.Fault.ErrorBurst(1, 500)
	if _, err := sys.Reset("ForceOff"); err == nil {
		t.Fatal("a 500 on ForceOff must surface as an error")
	}
	if got := s.Stats().Requests["POST"] - posts; got != 1 {
		t.Fatalf("ForceOff POSTs after a 500 = %d, want exactly 1", got)
	}

	// The BMC carries out a ForceOff but the answer is lost: the client must not send it again.
	posts = s.Stats().Requests["POST"]
	s.Fault.DropResponses("POST", 1)
	if err := c.Reset(ctx, ResetForceOff); err == nil {
		t.Fatal("a ForceOff without an answer must surface as an error")
	}
	if got := s.Stats().Requests["POST"] - posts; got != 1 {
		t.Fatalf("ForceOff POSTs after a lost answer = %d, want exactly 1", got)
	}
	if n := s.Stats().Resets["ForceOff"]; n != 1 {
		t.Fatalf("ForceOff carried out %d times, want 1", n)
	}

	// The next reconcile reads the power state first: the system is off, nothing is sent.
	waitPower(t, c, PowerOff)
	posts = s.Stats().Requests["POST"]
	if err := c.Reset(ctx, ResetForceOff); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Requests["POST"] - posts; got != 0 {
		t.Errorf("ForceOff of a system that is off sent %d POSTs", got)
	}
}

func TestConflictIsReportedAsErrConflict(t *testing.T) {
	s := newSim(t, simulator.Config{})
	c := connectTo(t, s, fastOpts)
	s.Fault.Conflicts(1)
	if err := c.Reset(context.Background(), ResetOn); !errors.Is(err, ErrConflict) {
		t.Fatalf("Reset during a conflict = %v, want ErrConflict", err)
	}
	if n := s.Stats().Resets["On"]; n != 0 {
		t.Errorf("the refused reset was carried out %d times", n)
	}
	if err := c.Reset(context.Background(), ResetOn); err != nil {
		t.Fatalf("after the conflict cleared: %v", err)
	}
}

func TestHangingBMCTimesOutThenTripsTheBreaker(t *testing.T) {
	s := newSim(t, simulator.Config{})
	c := connectTo(t, s, fastOpts)
	ctx := context.Background()
	if _, err := c.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
	s.Fault.Hang()
	start := time.Now()
	if _, err := c.PowerState(ctx); err == nil {
		t.Fatal("a hanging BMC must give an error")
	}
	// 1 try + 3 retries, each cut at the attempt timeout, plus backoff; well under the call timeout.
	if d := time.Since(start); d > fastOpts.CallTimeout {
		t.Errorf("call took %s, more than the call timeout", d)
	}
	if !c.tr.breaker.open() {
		t.Fatal("breaker still closed after 4 consecutive timeouts")
	}
	before := s.Stats().Requests["GET"]
	if _, err := c.PowerState(ctx); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("while open: %v, want ErrCircuitOpen", err)
	}
	if got := s.Stats().Requests["GET"] - before; got != 0 {
		t.Errorf("an open breaker still sent %d requests", got)
	}

	s.Fault.Unhang()
	waitFor(t, 5*time.Second, "breaker to close after the BMC recovered", func() (bool, any) {
		_, err := c.PowerState(ctx)
		return err == nil, err
	})
}

func TestBMCResetDuringFirmwareTaskFailsTheTaskWithoutReflashing(t *testing.T) {
	s := newSim(t, simulator.Config{TaskDuration: 2 * time.Second})
	c := connectTo(t, s, fastOpts)
	ctx := context.Background()
	uri, err := c.UpdateFirmware(ctx, "http://firmware.example/U46-v3.00.bin", FirmwareBIOS, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.ResetBMC(100 * time.Millisecond) // sessions gone, 503 for a while, task interrupted

	var task *Task
	waitFor(t, 5*time.Second, "the interrupted task to report", func() (bool, any) {
		task, err = c.TaskStatus(ctx, uri)
		return err == nil && task.Done, err
	})
	if !task.Failed || task.Message == "" {
		t.Fatalf("task = %+v, want failed with a message", task)
	}
	if bios, _ := s.FirmwareVersions(); bios == "U46-v3.00" || s.PendingBIOSVersion() == "U46-v3.00" {
		t.Error("interrupted update changed the version")
	}
	if n := s.Stats().SimpleUpdates; n != 1 {
		t.Errorf("SimpleUpdate sent %d times, want 1", n)
	}
	if st := s.Stats(); st.UpdatesInterrupted != 1 || st.UpdatesCompleted != 0 {
		t.Errorf("the simulator counted %d updates interrupted by its reset and %d completed, want 1 and 0", st.UpdatesInterrupted, st.UpdatesCompleted)
	}
	if n := s.Stats().SessionsCreated; n != 2 {
		t.Errorf("sessions = %d, want 2 (re-login after the BMC reset)", n)
	}
}

// The simulator's update counts, which test/manager compares between runs, count firmware tasks
// only: an erase a BMC reset ended is no interrupted update, and a flash that ran its course is
// counted completed.
func TestTheSimulatorCountsOnlyFirmwareTasksAsUpdates(t *testing.T) {
	s := newSim(t, simulator.Config{TaskDuration: 200 * time.Millisecond, EraseDuration: 2 * time.Second})
	c := connectTo(t, s, fastOpts)
	ctx := context.Background()
	if _, err := c.EraseDrives(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	s.ResetBMC(50 * time.Millisecond) // the erases' tasks end in Exception
	var uri string
	waitFor(t, 5*time.Second, "the BMC back from its reset", func() (bool, any) {
		var err error
		uri, err = c.UpdateFirmware(ctx, "http://firmware.example/U46-v3.00.bin", FirmwareBIOS, nil)
		return err == nil, err
	})
	waitFor(t, 5*time.Second, "the update to end", func() (bool, any) {
		task, err := c.TaskStatus(ctx, uri)
		return err == nil && task.Done, err
	})
	if st := s.Stats(); st.UpdatesInterrupted != 0 || st.UpdatesCompleted != 1 {
		t.Errorf("%d updates interrupted and %d completed, want 0 and 1 (an erase is no update)", st.UpdatesInterrupted, st.UpdatesCompleted)
	}
}

func TestWronglyReportedPowerStateIsVisibleAndRecovers(t *testing.T) {
	s := newSim(t, simulator.Config{PoweredOn: true})
	c := connectTo(t, s, fastOpts)
	ctx := context.Background()
	s.Fault.WrongPowerState(300 * time.Millisecond)
	got, err := c.PowerState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != PowerOff || s.PowerState() != simulator.PowerOn {
		t.Fatalf("during the fault the BMC should claim Off while On; client saw %s", got)
	}
	// The layer reports what the BMC says; the host controller re-reads until it settles.
	waitPower(t, c, PowerOn)
}

func TestTLSVerifiesTheBMCCertificate(t *testing.T) {
	s := newSim(t, simulator.Config{TLS: true})
	ctx := context.Background()

	noCA := target(s)
	noCA.CABundle = nil
	if _, err := connect(ctx, noCA, fastOpts, nil); err == nil {
		t.Fatal("a self-signed BMC certificate was accepted without its CA")
	} else if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "caBundleName") {
		t.Errorf("a certificate not trusted gave %v: want ErrTLS, naming spec.bmc.caBundleName", err)
	}
	// The BMC saw the handshake fail (the e2e spec tls counts them to know a host tried).
	for deadline := time.Now().Add(5 * time.Second); s.Stats().TLSHandshakeFailures == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Stats().TLSHandshakeFailures; n == 0 {
		t.Error("the simulator counted no failed TLS handshake")
	}
	withCA, err := connect(ctx, target(s), fastOpts, nil)
	if err != nil {
		t.Fatalf("with the CA bundle: %v", err)
	}
	if err := withCA.Check(ctx); err != nil {
		t.Fatal(err)
	}
	insecure := noCA
	insecure.InsecureSkipVerify = true
	c, err := connect(ctx, insecure, fastOpts, nil)
	if err != nil {
		t.Fatalf("insecureSkipVerify: %v", err)
	}
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in, base, system, err string
	}{
		{in: "redfish://10.0.0.5/redfish/v1/Systems/1", base: "https://10.0.0.5:443", system: "/redfish/v1/Systems/1"},
		{in: "redfish+https://bmc.rack1:8443", base: "https://bmc.rack1:8443"},
		{in: "redfish+http://127.0.0.1:8000/redfish/v1/Systems/System.Embedded.1/", base: "http://127.0.0.1:8000", system: "/redfish/v1/Systems/System.Embedded.1"},
		{in: "redfish://[fd00::5]/", base: "https://[fd00::5]:443"},
		{in: "https://10.0.0.5", err: "scheme must be"},
		{in: "ipmi://10.0.0.5", err: "scheme must be"},
		{in: "redfish://", err: "no host"},
		{in: "redfish://10.0.0.5:70000", err: "between 1 and 65535"},
		{in: "redfish://admin:secret@10.0.0.5", err: "must not carry credentials"},
		{in: "redfish://10.0.0.5/redfish/v1/Managers/1", err: "the path must be"},
		// Found by FuzzParseAddress: the zone made a base URL that Go's URL parser refuses.
		{in: "redfish+http://[fe80::1%25eth0]:80", err: "IPv6 zone"},
		// Found by FuzzParseAddress: a typo that makes the credentials no URL userinfo.
		{in: "redfish//admin:secret@10.0.0.5", err: "scheme must be"},
		{in: "redfish:/admin:secret@10.0.0.5", err: "no host"},
		{in: "redfish://::", err: "not an IP address or host name"},
		// A password with a '/' ends the URL's authority there: Go's parser then quotes it as a port.
		{in: "redfish://admin:secret/x@10.0.0.5", err: "not a URL"},
		{in: "redfish://bmc$1.rack", err: "not an IP address or host name"},
		{in: "redfish://bmc_07.rack-1.example:443", base: "https://bmc_07.rack-1.example:443"},
	} {
		got, err := ParseAddress(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%q: error leaks the password: %v", tc.in, err)
			}
			continue
		}
		if err != nil || got.BaseURL != tc.base || got.SystemPath != tc.system {
			t.Errorf("%q = %+v, %v; want %s %s", tc.in, got, err, tc.base, tc.system)
		}
	}
}

// A session that expires while several requests are in flight is renewed once: the late 401s of
// requests sent with the old token must not wipe the session a sibling just created, and the old
// session is deleted once.
func TestConcurrentSessionRenewalCreatesOneSessionAndDeletesTheOldOnce(t *testing.T) {
	s := newSim(t, simulator.Config{})
	opts := fastOpts
	opts.MaxConcurrentRequests = 8
	opts.AttemptTimeout = 2 * time.Second
	c := connectTo(t, s, opts)
	ctx := context.Background()
	if _, err := c.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
	s.ExpireSessions()
	before := s.Stats()

	// 7 requests in flight with the old token, answered slowly...
	s.Fault.Latency(300 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 7 {
		wg.Go(func() {
			if _, err := c.PowerState(ctx); err != nil {
				errs <- err
			}
		})
	}
	waitFor(t, 5*time.Second, "7 requests at the BMC", func() (bool, any) {
		n := s.Stats().Requests["GET"] - before.Requests["GET"]
		return n >= 7, n
	})
	// ...while an 8th is refused at once and renews the session: the 7 late 401s come back after
	// the new session exists.
	s.Fault.Latency(0)
	if _, err := c.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	// The refused session is deleted in the background, once the new one exists.
	waitFor(t, 5*time.Second, "the refused session deleted", func() (bool, any) {
		n := s.Stats().Requests["DELETE"] - before.Requests["DELETE"]
		return n >= 1, n
	})
	after := s.Stats()
	if n := after.SessionsCreated - before.SessionsCreated; n != 1 {
		t.Errorf("%d new sessions for one expiry, want exactly 1", n)
	}
	if n := after.Requests["DELETE"] - before.Requests["DELETE"]; n != 1 {
		t.Errorf("the expired session was deleted %d times, want once", n)
	}
}

// A BMC that never answered keeps its breaker across failed connects: once open, Get fails fast
// without a request instead of holding a reconcile worker for the whole call timeout, and a
// half-open probe is a single attempt, not a whole retry budget.
func TestBMCThatNeverConnectedOpensTheBreakerAndIsProbedWithOneRequest(t *testing.T) {
	s := newSim(t, simulator.Config{})
	s.Fault.Hang()
	defer s.Fault.Unhang()
	pool := NewPool(fastOpts)
	ctx := context.Background()
	tg := target(s)

	if _, err := settle(t, pool, tg); err == nil {
		t.Fatal("a hanging BMC must not connect")
	}
	if n := s.Stats().Requests["GET"]; n != fastOpts.BreakerThreshold {
		t.Errorf("the first connect sent %d requests, want %d (retries stop once the breaker opens)", n, fastOpts.BreakerThreshold)
	}

	before := s.Stats().Requests["GET"]
	start := time.Now()
	for range 5 {
		if _, err := pool.Get(ctx, tg); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("a connect while the breaker is open: %v, want ErrCircuitOpen", err)
		}
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("5 connects to an open breaker took %s: they must fail fast", d)
	}
	if n := s.Stats().Requests["GET"] - before; n != 0 {
		t.Errorf("an open breaker let %d requests through", n)
	}

	// After the cooldown one probe goes through; it fails and the breaker opens again.
	time.Sleep(fastOpts.BreakerCooldown)
	before = s.Stats().Requests["GET"]
	if _, err := settle(t, pool, tg); err == nil {
		t.Fatal("the probe of a hanging BMC must fail")
	}
	if n := s.Stats().Requests["GET"] - before; n != 1 {
		t.Errorf("the half-open probe sent %d requests, want 1", n)
	}
	if _, err := pool.Get(ctx, tg); !errors.Is(err, ErrCircuitOpen) {
		t.Errorf("after a failed probe: %v, want ErrCircuitOpen", err)
	}
}

// BMCs echo rejected values in their errors; a seed URL carries its claim's token, and
// credentials may be in a URL: neither may leave the bmc package in an error.
func TestBMCErrorsEchoingAnImageURLDoNotCarryTheSeedToken(t *testing.T) {
	s := newSim(t, simulator.Config{})
	c := connectTo(t, s, fastOpts)
	const token = "c0ffee0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
	s.Fault.RejectMedia(2)
	seedURL := "http://seed.example:30082/v1/ns/m1/" + token + "/cidata.iso"
	for _, insert := range []func(context.Context) error{
		func(ctx context.Context) error { return c.InsertMedia(ctx, seedURL, "") },                             // the CD rejects it
		func(ctx context.Context) error { return c.InsertMedia(ctx, "http://images.example/os.iso", seedURL) }, // the seed device rejects it
	} {
		err := insert(context.Background())
		if err == nil {
			t.Fatal("the BMC rejected the media")
		}
		if strings.Contains(err.Error(), token) {
			t.Errorf("the error carries the seed token: %v", err)
		}
		if !strings.Contains(err.Error(), "/v1/ns/m1/REDACTED/cidata.iso") {
			t.Errorf("the error should still say what was rejected: %v", err)
		}
	}
	for in, want := range map[string]string{
		"https://admin:hunter2@10.0.0.5/x": "https://REDACTED@10.0.0.5/x",
		"https://s3.example/fw/bios.bin?X-Amz-Credential=AKIA1&X-Amz-Signature=f00d&X-Amz-Security-Token=IQo&x-id=GetObject": "https://s3.example/fw/bios.bin?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED&x-id=GetObject",
		"https://blob.example/fw.bin?sv=2024&sig=abc%2Bdef":                                                                  "https://blob.example/fw.bin?sv=2024&sig=REDACTED",
		"http://images.example/os.iso?token=s3cr3t#frag":                                                                     "http://images.example/os.iso?token=REDACTED#frag",
		"https://storage.example/b/diag.iso?X-Goog-Credential=svc%40p&X-Goog-Signature=beef":                                 "https://storage.example/b/diag.iso?X-Goog-Credential=REDACTED&X-Goog-Signature=REDACTED",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%s) = %s, want %s", in, got, want)
		}
	}
}

// A BMC whose login hangs holds the caller for ConnectWait at most: the connection goes on in the
// background, callers meanwhile get ErrConnecting without a request of their own, and the outcome
// (here the timeout) is reported once before the next attempt starts.
func TestGetDoesNotWaitForALoginThatHangs(t *testing.T) {
	s := newSim(t, simulator.Config{})
	s.Fault.HangLogins()
	defer s.Fault.Unhang()
	opts := fastOpts
	opts.ConnectWait = 50 * time.Millisecond
	opts.AttemptTimeout = 2 * time.Second
	pool := NewPool(opts)
	tg := target(s)

	start := time.Now()
	for range 10 {
		if _, err := pool.Get(context.Background(), tg); !errors.Is(err, ErrConnecting) {
			t.Fatalf("Get during a hanging login = %v, want ErrConnecting", err)
		}
	}
	if d := time.Since(start); d > opts.AttemptTimeout/4 {
		t.Errorf("10 Gets during a hanging login took %s: only the first may wait, and only %s", d, opts.ConnectWait)
	}
	if n := s.Stats().Requests["POST"]; n != 1 {
		t.Errorf("%d logins sent while one hangs, want 1", n)
	}
	_, err := settle(t, pool, tg)
	if err == nil || !strings.Contains(err.Error(), "creating a Redfish session") {
		t.Fatalf("the hanging login's outcome = %v, want its timeout", err)
	}
	s.Fault.Unhang()
	c, err := settle(t, pool, tg)
	if err != nil {
		t.Fatalf("after the BMC recovered: %v", err)
	}
	if _, err := c.PowerState(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// However many reconciles use one BMC at once, it sees at most MaxConcurrentRequests requests at a
// time (BMCs answer slowly or drop connections beyond a few).
func TestRequestsToOneBMCAreLimitedToMaxConcurrentRequests(t *testing.T) {
	s := newSim(t, simulator.Config{})
	pool := NewPool(Options{MaxConcurrentRequests: 3})
	c, err := settle(t, pool, target(s))
	if err != nil {
		t.Fatal(err)
	}
	s.Fault.Latency(100 * time.Millisecond)
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			if _, err := c.PowerState(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if peak := s.Stats().PeakInFlight; peak != 3 {
		t.Errorf("12 concurrent calls reached the BMC %d at a time, want 3", peak)
	}
}

// A host deleted (Forget) while its BMC's login hangs leaves no session behind on the BMC, and the
// attempt stops instead of running for the whole call timeout.
func TestForgetDuringAConnectionLeavesNoSession(t *testing.T) {
	s := newSim(t, simulator.Config{})
	s.Fault.HangLogins()
	opts := fastOpts
	opts.AttemptTimeout, opts.CallTimeout = 5*time.Second, 10*time.Second
	pool := NewPool(opts)
	tg := target(s)
	if _, err := pool.Get(context.Background(), tg); !errors.Is(err, ErrConnecting) {
		t.Fatalf("Get during a hanging login = %v, want ErrConnecting", err)
	}
	pool.Forget(tg.Address)
	s.Fault.Unhang() // the login the BMC was holding completes now, or was given up
	waitFor(t, 5*time.Second, "no session on the BMC", func() (bool, any) {
		n := s.ActiveSessions()
		return n == 0, n
	})
	if n := pool.Len(); n != 0 {
		t.Errorf("the pool holds %d entries after Forget", n)
	}
}

// A BMC answer that redirects elsewhere never takes the credentials (Basic) or the session token
// along to the other host.
func TestCredentialsNeverFollowARedirectToAnotherHost(t *testing.T) {
	seen := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization") + r.Header.Get("X-Auth-Token")
		w.WriteHeader(http.StatusOK)
	}))
	defer other.Close()
	bmcSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, other.URL+"/elsewhere", http.StatusFound)
	}))
	defer bmcSrv.Close()
	opts := Options{}.withDefaults()
	tr := newTransport(http.DefaultTransport, bmcSrv.URL, "admin", "hunter2", opts, newBreaker(opts))
	tr.basicAuth = true
	resp, err := (&http.Client{Transport: tr}).Get(bmcSrv.URL + "/redfish/v1/Systems/1")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := <-seen; got != "" {
		t.Errorf("the other host received credentials: %q", got)
	}
}

// With Basic authentication a refused password is sent once per request, not again: each retry
// would be one more failed login towards the account's lockout.
func TestBasicAuthDoesNotResendARefusedPassword(t *testing.T) {
	s := newSim(t, simulator.Config{})
	tg := target(s)
	tg.BasicAuth, tg.Password = true, "not-the-password"
	c, err := settle(t, NewPool(Options{}), tg)
	if err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Requests["GET"]
	if err := c.Check(context.Background()); !errors.Is(err, ErrAuth) {
		t.Fatalf("Check with a wrong password = %v, want ErrAuth", err)
	}
	if n := s.Stats().Requests["GET"] - before; n != 1 {
		t.Errorf("%d requests carried the wrong password, want 1", n)
	}
}

// A breaker always leaves half-open: a probe taken by a client the pool has since logged out
// (credentials or CA rotated) ends without a request, and must not keep the breaker shut for good.
func TestABreakerProbedThroughALoggedOutClientRecovers(t *testing.T) {
	s := newSim(t, simulator.Config{TLS: true})
	pool := NewPool(fastOpts)
	ctx := context.Background()
	tg := target(s)
	c, err := settle(t, pool, tg)
	if err != nil {
		t.Fatal(err)
	}
	// The BMC hangs long enough to open the breaker, then recovers.
	s.Fault.Hang()
	if _, err := c.PowerState(ctx); err == nil {
		t.Fatal("a hanging BMC answered")
	}
	s.Fault.Unhang()
	// The CA bundle is rotated (same trust, other bytes): the pool logs the old client out.
	rot := tg
	rot.CABundle = append(slices.Clone(tg.CABundle), '\n')
	if _, err := pool.Get(ctx, rot); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Get with the rotated CA while the breaker is open: %v, want ErrCircuitOpen", err)
	}
	waitFor(t, 5*time.Second, "the old client to be logged out", func() (bool, any) {
		cl := c.(*client)
		cl.tr.mu.Lock()
		defer cl.tr.mu.Unlock()
		return cl.tr.closed, nil
	})
	// After the cooldown a reconcile still holding the old client takes the half-open probe.
	time.Sleep(fastOpts.BreakerCooldown)
	if _, err := c.PowerState(ctx); err == nil {
		t.Fatal("a logged-out client answered")
	}
	// The BMC is healthy: the rotated target connects within one more cooldown.
	deadline := time.Now().Add(2 * fastOpts.BreakerCooldown)
	for {
		_, err := settle(t, pool, rot)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the breaker never left half-open: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A BMC whose certificate is not trusted yet (its CA bundle missing or another CA's): every try
// says so (ErrTLS), however many, and never opens the breaker, so the host connects at its first
// try once the right bundle is given.
func TestAnUntrustedCertificateNeverOpensTheBreaker(t *testing.T) {
	s := newSim(t, simulator.Config{TLS: true})
	pool := NewPool(fastOpts)
	untrusted := target(s)
	untrusted.CABundle = nil
	for i := range 2 * fastOpts.BreakerThreshold {
		if _, err := settle(t, pool, untrusted); !errors.Is(err, ErrTLS) {
			t.Fatalf("try %d without the CA: %v, want ErrTLS", i+1, err)
		}
	}
	c, err := settle(t, pool, target(s))
	if err != nil {
		t.Fatalf("with the CA, after %d untrusted tries: %v", 2*fastOpts.BreakerThreshold, err)
	}
	if _, err := c.PowerState(t.Context()); err != nil {
		t.Fatal(err)
	}
}
