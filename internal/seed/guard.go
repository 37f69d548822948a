package seed

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of the request guard (see Server).
const (
	defaultRate        = 50
	defaultBurst       = 500
	defaultIPXERate    = 5
	defaultIPXEBurst   = 20
	defaultMaxInFlight = 64
	// maxSources bounds the memory the per-source limiters take whatever the number of sources.
	maxSources = 4096
)

// guard caps the requests in flight and rate-limits every request per source before anything
// else is looked at.
func (s *Server) guard(next http.Handler) http.Handler {
	s.guardOnce.Do(func() {
		s.all = newLimiters(s.Rate, s.Burst, defaultRate, defaultBurst)
		s.ipxe = newLimiters(s.IPXERate, s.IPXEBurst, defaultIPXERate, defaultIPXEBurst)
		n := s.MaxInFlight
		if n <= 0 {
			n = defaultMaxInFlight
		}
		s.inFlight = make(chan struct{}, n)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.all.allow(r) {
			tooMany(w)
			return
		}
		select {
		case s.inFlight <- struct{}{}:
			defer func() { <-s.inFlight }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func tooMany(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, "too many requests", http.StatusTooManyRequests)
}

// limiters holds a token bucket per source. When it holds maxSources, the source seen least
// recently is forgotten to make room: no other source's bucket is refilled. (A flood from more
// sources than that gets a fresh burst per source it comes back from: the in-flight cap is what
// bounds it then.)
type limiters struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	sources map[netip.Prefix]*sourceLimiter
}

type sourceLimiter struct {
	*rate.Limiter
	lastSeen time.Time
}

func newLimiters(limit rate.Limit, burst int, defLimit rate.Limit, defBurst int) *limiters {
	if limit <= 0 {
		limit = defLimit
	}
	if burst <= 0 {
		burst = defBurst
	}
	return &limiters{limit: limit, burst: burst, sources: map[netip.Prefix]*sourceLimiter{}}
}

// allow takes a token from the bucket of the request's source.
func (l *limiters) allow(r *http.Request) bool {
	source := sourceOf(r.RemoteAddr)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.sources[source]
	if !ok {
		if len(l.sources) >= maxSources {
			l.forgetLeastRecent()
		}
		b = &sourceLimiter{Limiter: rate.NewLimiter(l.limit, l.burst)}
		l.sources[source] = b
	}
	b.lastSeen = now
	return b.AllowN(now, 1)
}

// forgetLeastRecent drops the bucket seen least recently (a scan: it runs only when a new source
// arrives while the map is full). Caller holds mu.
func (l *limiters) forgetLeastRecent() {
	var oldest netip.Prefix
	var seen time.Time
	for k, v := range l.sources {
		if seen.IsZero() || v.lastSeen.Before(seen) {
			oldest, seen = k, v.lastSeen
		}
	}
	delete(l.sources, oldest)
}

// sourceOf is the rate-limited unit of a remote address: the address itself (IPv4 or IPv6: the
// hosts of a provisioning LAN share one /64, and link-local addresses one fe80::/64). Behind a
// NAT, or a NodePort Service that does not keep source addresses, a whole rack is one source:
// size Rate and Burst for it.
func sourceOf(remote string) netip.Prefix {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap()
	return netip.PrefixFrom(a.WithZone(""), a.BitLen())
}
