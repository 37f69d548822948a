package bmc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// fastOpts keep fault tests quick: short timeouts and backoff, a breaker that opens after 3.
var fastOpts = Options{
	CallTimeout: 5 * time.Second, AttemptTimeout: 300 * time.Millisecond, Backoff: 10 * time.Millisecond,
	Retries: 3, BreakerThreshold: 3, BreakerCooldown: 500 * time.Millisecond,
}

func newSim(t testing.TB, cfg simulator.Config) *simulator.Server {
	t.Helper()
	if cfg.ID == "" {
		cfg.ID = "sim"
	}
	if cfg.PowerLatency == 0 {
		cfg.PowerLatency = 30 * time.Millisecond
	}
	if cfg.TaskDuration == 0 {
		cfg.TaskDuration = 400 * time.Millisecond
	}
	s, err := simulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func target(s *simulator.Server) Target {
	u, p := s.Credentials()
	return Target{Address: s.Address(), Username: u, Password: p, CABundle: s.CACertPEM()}
}

func connectTo(t *testing.T, s *simulator.Server, opts Options) *client {
	t.Helper()
	c, err := connect(context.Background(), target(s), opts, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.close(5 * time.Second) })
	return c
}

// settle calls pool.Get until the connection attempt has an outcome (not ErrConnecting), as a
// reconcile that requeues does.
func settle(t *testing.T, pool *Pool, tg Target) (Client, error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pool.Get(context.Background(), tg)
		if !errors.Is(err, ErrConnecting) || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFor polls cond until it holds or the deadline passes; cond reports what it saw last.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, any)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last any
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last seen: %v", timeout, what, last)
}

func waitPower(t *testing.T, c Client, want PowerState) {
	t.Helper()
	waitFor(t, 5*time.Second, "power "+string(want), func() (bool, any) {
		got, err := c.PowerState(context.Background())
		if err != nil {
			return false, err
		}
		return got == want, got
	})
}
