package webhooks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
)

// HostIdentityIndex indexes RedfishHosts by what makes two of them the same server: the Redfish
// service of their BMC address and their boot MAC (see IndexHostIdentity). The duplicate check
// looks a new host's identity up in it instead of listing every host: at N = 1000 hosts created
// at once, a list per admission was quadratic, and the webhook timed out.
const HostIdentityIndex = "caprf.webhook.host.identity"

// IndexHostIdentity returns the identity keys of a RedfishHost.
func IndexHostIdentity(o client.Object) []string {
	h, ok := o.(*infrav1.RedfishHost)
	if !ok {
		return nil
	}
	return identityKeys(h)
}

// identityKeys are "bmc <service>" (the same service may hold other systems: the system paths
// are compared by the caller) and "mac <lower-case MAC>".
func identityKeys(h *infrav1.RedfishHost) []string {
	var keys []string
	if a, err := bmc.ParseAddress(h.Spec.BMC.Address); err == nil {
		keys = append(keys, "bmc "+a.BaseURL)
	}
	if h.Spec.BootMACAddress != "" {
		keys = append(keys, "mac "+strings.ToLower(h.Spec.BootMACAddress))
	}
	return keys
}

// others returns the hosts that may be the same server as h: every host (listed from the API
// server) without a cache of every namespace; otherwise the cache's hosts with one of h's identity
// keys and those this webhook admitted moments ago, each read again from the API server (the
// cache may be behind a host re-pointed or deleted, and an admission is not a stored host).
func (v *Host) others(ctx context.Context, h *infrav1.RedfishHost) ([]infrav1.RedfishHost, error) {
	if v.Hosts != nil {
		out, err := v.lookUp(ctx, h)
		// A manager starting serves its webhooks before its cache has started: the API server
		// answers meanwhile.
		if notStarted := (*cache.ErrCacheNotStarted)(nil); !errors.As(err, &notStarted) {
			return out, err
		}
	}
	hosts := &infrav1.RedfishHostList{}
	if err := v.Reader.List(ctx, hosts); err != nil {
		return nil, err
	}
	return hosts.Items, nil
}

// lookUp returns the cache's hosts with one of h's identity keys and those this webhook admitted
// moments ago, read from the API server.
func (v *Host) lookUp(ctx context.Context, h *infrav1.RedfishHost) ([]infrav1.RedfishHost, error) {
	self := types.NamespacedName{Namespace: h.Namespace, Name: h.Name}
	keys := identityKeys(h)
	names := v.recent.matching(keys, time.Now())
	for _, k := range keys {
		hosts := &infrav1.RedfishHostList{}
		if err := v.Hosts.List(ctx, hosts, client.MatchingFields{HostIdentityIndex: k}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		for i := range hosts.Items {
			names = append(names, client.ObjectKeyFromObject(&hosts.Items[i]))
		}
	}
	slices.SortFunc(names, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	var out []infrav1.RedfishHost
	for _, n := range slices.Compact(names) {
		if n == self {
			continue
		}
		o := &infrav1.RedfishHost{}
		if err := v.Reader.Get(ctx, n, o); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		out = append(out, *o)
	}
	return out, nil
}

// recentFor is how long an admitted host is remembered: far longer than the cache takes to see
// it (milliseconds), so that hosts applied one after another are checked against each other.
const recentFor = 30 * time.Second

// recentHosts are the hosts this webhook admitted in the last recentFor. Hosts admitted at the
// same moment by two replicas of the webhook, or in parallel, are not checked against each other.
type recentHosts struct {
	mu      sync.Mutex
	entries []recentHost
}

type recentHost struct {
	at   time.Time
	name types.NamespacedName
	keys []string
}

func (r *recentHosts) add(h *infrav1.RedfishHost, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(now)
	r.entries = append(r.entries, recentHost{at: now, name: client.ObjectKeyFromObject(h), keys: identityKeys(h)})
}

func (r *recentHosts) matching(keys []string, now time.Time) []types.NamespacedName {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(now)
	var out []types.NamespacedName
	for _, e := range r.entries {
		if slices.ContainsFunc(e.keys, func(k string) bool { return slices.Contains(keys, k) }) {
			out = append(out, e.name)
		}
	}
	return out
}

// prune drops what is older than recentFor (entries are in admission order).
func (r *recentHosts) prune(now time.Time) {
	i := 0
	for i < len(r.entries) && now.Sub(r.entries[i].at) > recentFor {
		i++
	}
	r.entries = r.entries[i:]
}
