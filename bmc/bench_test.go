package bmc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// benchLatency is the simulated BMC's answer time for every request: the floor a client cannot
// beat. Figures are reported as ratios against it.
const benchLatency = 2 * time.Millisecond

func benchSim(b *testing.B, id string, index int) *simulator.Server {
	b.Helper()
	s, err := simulator.New(simulator.Config{ID: id, Index: index})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	s.Fault.Latency(benchLatency)
	return s
}

func reportFloor(b *testing.B, c Client, before Stats, ops int, elapsed time.Duration, parallel int) {
	after := c.Stats()
	reqPerOp := float64(after.Requests-before.Requests) / float64(ops)
	perOp := elapsed / time.Duration(ops)
	b.ReportMetric(reqPerOp, "req/op")
	// The floor: each op's requests, back to back at benchLatency, spread over parallel BMCs.
	floor := time.Duration(reqPerOp * float64(benchLatency) / float64(parallel))
	b.ReportMetric(float64(perOp)/float64(floor), "x-latency-floor")
	b.ReportMetric(float64(time.Second)/float64(perOp), "ops/s")
}

// BenchmarkPowerStateRead: one GET of the system per op, through the pooled client and session.
func BenchmarkPowerStateRead(b *testing.B) {
	s := benchSim(b, "bench", 0)
	pool := NewPool(Options{})
	ctx := context.Background()
	c, err := pool.Get(ctx, Target{Address: s.Address(), Username: "admin", Password: "password"})
	if err != nil {
		b.Fatal(err)
	}
	before := c.Stats()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		c, _ := pool.Get(ctx, Target{Address: s.Address(), Username: "admin", Password: "password"})
		if _, err := c.PowerState(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportFloor(b, c, before, b.N, time.Since(start), 1)
	b.ReportMetric(float64(s.Stats().SessionsCreated), "sessions")
}

// BenchmarkProvisionSequence: insert virtual media (ejecting the previous image), set a one-time
// CD boot and read the power state, the Redfish half of provisioning a host.
func BenchmarkProvisionSequence(b *testing.B) {
	s := benchSim(b, "bench", 0)
	ctx := context.Background()
	c, err := Connect(ctx, Target{Address: s.Address(), Username: "admin", Password: "password"}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	images := []string{"http://img.example/a.iso", "http://img.example/b.iso"}
	before := c.Stats()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := c.InsertMedia(ctx, images[i%2], ""); err != nil {
			b.Fatal(err)
		}
		if err := c.SetBootOverride(ctx, BootOverride{Target: BootCd}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.PowerState(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportFloor(b, c, before, b.N, time.Since(start), 1)
}

// BenchmarkFleetPowerStateRead: 20 BMCs read concurrently, one worker each, as a controller with
// 20 workers does. The floor is one latency per op per BMC.
func BenchmarkFleetPowerStateRead(b *testing.B) {
	const bmcs = 20
	pool := NewPool(Options{})
	ctx := context.Background()
	clients := make([]Client, bmcs)
	for i := range clients {
		s := benchSim(b, "fleet", i)
		c, err := pool.Get(ctx, Target{Address: s.Address(), Username: "admin", Password: "password"})
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	var before Stats
	for _, c := range clients {
		st := c.Stats()
		before.Requests += st.Requests
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := (b.N + bmcs - 1) / bmcs
	for _, c := range clients {
		wg.Add(1)
		go func(c Client) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := c.PowerState(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var after int64
	for _, c := range clients {
		after += c.Stats().Requests
	}
	ops := per * bmcs
	perOp := elapsed / time.Duration(ops)
	reqPerOp := float64(after-before.Requests) / float64(ops)
	floor := time.Duration(reqPerOp * float64(benchLatency) / bmcs)
	b.ReportMetric(reqPerOp, "req/op")
	b.ReportMetric(float64(perOp)/float64(floor), "x-latency-floor")
	b.ReportMetric(float64(time.Second)/float64(perOp), "ops/s")
}
