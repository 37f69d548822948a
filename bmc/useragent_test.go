package bmc

import (
	"sync"
	"testing"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// Every request to a BMC, the login and the logout included, names the replica that sent it in
// its User-Agent when Options.UserAgent is set: a BMC's audit log then says which manager replica
// acted.
func TestEveryRequestCarriesTheReplicasUserAgent(t *testing.T) {
	s := newSim(t, simulator.Config{})
	var mu sync.Mutex
	agents := map[string]int{}
	methods := map[string]int{}
	s.OnRequest(func(r simulator.Request) {
		mu.Lock()
		defer mu.Unlock()
		agents[r.Header.Get("User-Agent")]++
		methods[r.Method]++
	})
	opts := fastOpts
	opts.UserAgent = "cluster-api-provider-redfish (caprf-manager-0)"
	c := connectTo(t, s, opts)
	if _, err := c.PowerState(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.close(fastOpts.CallTimeout)
	mu.Lock()
	defer mu.Unlock()
	if len(agents) != 1 || agents[opts.UserAgent] < 4 || methods["POST"] == 0 || methods["DELETE"] == 0 {
		t.Errorf("User-Agents seen by the BMC: %v in %v requests, want only %q (service root, login, power state, logout)", agents, methods, opts.UserAgent)
	}
}
