package e2e

import (
	"context"
	"errors"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// A claim whose answer is lost (the API server applied the update, the client timed out) while
// the manager's cache lags behind it: the machine must not claim a second host.
var _ = Describe("Claim whose answer is lost", func() {
	It("leaves exactly one host claimed when the claim's answer is lost and the cache lags", Label("claim-lost-answer"), func() {
		b := newBed("lostanswer", 3, nil)
		b.waitHostsAvailable(3)
		b.createCluster("lostanswer")
		consumer := b.ns + "-cp" // the control plane's RedfishMachine (see controlPlane)
		apiFaults.arm(consumer, 3*time.Second)
		DeferCleanup(apiFaults.disarm)

		claimedBy := func() []string {
			hosts := &infrav1.RedfishHostList{}
			Expect(env.Manager.GetAPIReader().List(ctx, hosts, client.InNamespace(b.ns))).To(Succeed())
			var names []string
			for _, h := range hosts.Items {
				if c := h.Status.Claim; c != nil && c.Consumer.Name == consumer {
					names = append(names, h.Name)
				}
			}
			return names
		}
		done, watched := make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		most := 0
		stop := sync.OnceFunc(func() { close(done); <-watched })
		DeferCleanup(stop) // also when the spec fails before it stops watching
		go func() {
			defer GinkgoRecover()
			defer close(watched)
			for {
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
				n := len(claimedBy())
				mu.Lock()
				most = max(most, n)
				mu.Unlock()
			}
		}()
		b.controlPlane()
		stop()
		Expect(apiFaults.fired()).To(BeTrue(), "the claim's answer was never dropped: the spec proved nothing")
		mu.Lock()
		defer mu.Unlock()
		Expect(most).To(Equal(1), "hosts claimed by %s at once (read from the API server)", consumer)
		Expect(claimedBy()).To(HaveLen(1))
	})
})

// apiFaults drops the answer of the first claim of one consumer after the API server applied it,
// and then serves, for a while, that host as the cache knew it before the claim (a watch that
// lags), to every reader of the manager's client.
var apiFaults = &lostClaimAnswer{}

type lostClaimAnswer struct {
	mu       sync.Mutex
	consumer string
	lag      time.Duration
	dropped  bool
	stale    *infrav1.RedfishHost
	until    time.Time
}

func (f *lostClaimAnswer) arm(consumer string, lag time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.consumer, f.lag, f.dropped, f.stale = consumer, lag, false, nil
}

func (f *lostClaimAnswer) disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.consumer, f.stale = "", nil
}

func (f *lostClaimAnswer) fired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped
}

// staleView returns the host as it was before the dropped claim, while the lag lasts.
func (f *lostClaimAnswer) staleView(ns, name string) *infrav1.RedfishHost {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale == nil || f.stale.Namespace != ns || f.stale.Name != name || time.Now().After(f.until) {
		return nil
	}
	return f.stale.DeepCopy()
}

func (f *lostClaimAnswer) wrap(c client.Client) client.Client { return &faultyClient{Client: c, f: f} }

type faultyClient struct {
	client.Client
	f *lostClaimAnswer
}

func (c *faultyClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if h, ok := obj.(*infrav1.RedfishHost); ok {
		if s := c.f.staleView(key.Namespace, key.Name); s != nil {
			*h = *s
		}
	}
	return nil
}

func (c *faultyClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if hosts, ok := list.(*infrav1.RedfishHostList); ok {
		for i := range hosts.Items {
			if s := c.f.staleView(hosts.Items[i].Namespace, hosts.Items[i].Name); s != nil {
				hosts.Items[i] = *s
			}
		}
	}
	return nil
}

func (c *faultyClient) Status() client.SubResourceWriter {
	return &faultyStatus{SubResourceWriter: c.Client.Status(), f: c.f}
}

type faultyStatus struct {
	client.SubResourceWriter
	f *lostClaimAnswer
}

// errAnswerLost is what a client sees when the connection drops after the server applied a write.
var errAnswerLost = errors.New("http2: client connection lost (injected: the update was applied)")

func (s *faultyStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	h, ok := obj.(*infrav1.RedfishHost)
	s.f.mu.Lock()
	target := ok && !s.f.dropped && s.f.consumer != "" && h.Status.Claim != nil && h.Status.Claim.Consumer.Name == s.f.consumer
	s.f.mu.Unlock()
	if !target {
		return s.SubResourceWriter.Update(ctx, obj, opts...)
	}
	before := h.DeepCopy()
	before.Status.Claim = nil // the host as the cache knew it: unclaimed
	if err := s.SubResourceWriter.Update(ctx, obj, opts...); err != nil {
		return err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.dropped, s.f.stale, s.f.until = true, before, time.Now().Add(s.f.lag)
	return errAnswerLost
}
