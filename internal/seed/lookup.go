package seed

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// SecretType is the type of every seed Secret; the seed server looks at no other.
const SecretType corev1.SecretType = "infrastructure.cluster.x-k8s.io/redfish-seed"

// CacheOptions are the options of the seed server's metadata-only cache (Server.Seeds):
// Secrets of SecretType only (a field selector the API server applies), in namespaces (all when
// empty), keeping nothing but their names, versions and owners.
func CacheOptions(namespaces map[string]cache.Config) cache.Options {
	return cache.Options{
		DefaultNamespaces:    namespaces,
		DefaultFieldSelector: fields.OneTermEqualSelector("type", string(SecretType)),
		DefaultTransform: func(in any) (any, error) {
			if o, ok := in.(metav1.Object); ok {
				o.SetManagedFields(nil)
				o.SetAnnotations(nil)
				o.SetLabels(nil)
			}
			return in, nil
		},
	}
}

// readSeed is a seed Secret read from the API server, kept while its version is current.
type readSeed struct {
	secret *corev1.Secret
	token  [sha256.Size]byte
	read   time.Time
}

// seedTTL bounds how long a seed Secret read is kept in memory (it holds the claim's token): a
// seed deleted when the Node joined (or its machine) is not served longer than that even by a
// replica whose watch stalled.
const seedTTL = 30 * time.Second

// lookup returns the seed Secret of machine when token is its token and the seed is servable now
// (see Servable), nil otherwise (never saying which part was wrong).
func (s *Server) lookup(ctx context.Context, ns, machine, token string) (*corev1.Secret, error) {
	sec, sum, err := s.seedAndToken(ctx, ns, machine)
	if sec == nil || err != nil {
		return nil, err
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], got[:]) != 1 {
		return nil, nil
	}
	host := string(sec.Data[KeyHost])
	if host == "" {
		return sec, nil // written before seeds named their host: deleted at the join, as then
	}
	key := client.ObjectKey{Namespace: ns, Name: host}
	h := &infrav1.RedfishHost{}
	if err := s.Hosts.Get(ctx, key, h); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		h = nil
	}
	h, err = s.hostAllowing(ctx, key, h, refusalPurpose{machine: machine}, func(h *infrav1.RedfishHost) bool { return Servable(h, machine, s.now()) })
	if h == nil || err != nil {
		return nil, err
	}
	return sec, nil
}

// hostAllowing returns the host that allows a request: the cache's copy when it does, else the
// API server's when worth asking. Every replica serves seeds from a cache of its own, which may
// lag the API server and the leader whose host controller booted the host (a BMC may read its
// medium the moment it is inserted): a request the cache would refuse is refused only once the
// API server did, unless the cache's copy shows it cannot be meant (the caller says it is not worth asking: a MAC looked up
// by iPXE whose host has no PXE claim), or the reads this takes are spent (hostReadRate, for all
// requests: a token or MAC used after its window, or a rack PXE-looping, never takes the reads
// booting hosts need). A refusal the API server gave is kept refusalRecheck for the same host and
// purpose. nil when refused.
func (s *Server) hostAllowing(ctx context.Context, key client.ObjectKey, cached *infrav1.RedfishHost, purpose refusalPurpose, allows func(*infrav1.RedfishHost) bool) (*infrav1.RedfishHost, error) {
	if cached != nil && allows(cached) {
		return cached, nil
	}
	if purpose.ipxe && !pxeClaim(cached) {
		return nil, nil
	}
	refusal := refusalKey{key, purpose}
	now := s.now()
	s.refusedMu.Lock()
	at, ok := s.refused[refusal]
	s.refusedMu.Unlock()
	if ok && now.Sub(at) < refusalRecheck {
		return nil, nil
	}
	if !s.hostReads().Allow() {
		return nil, nil
	}
	ch := s.reading.DoChan("host:"+key.String(), func() (any, error) {
		// Shared by every request waiting for it: not cancelled with the first one.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		h := &infrav1.RedfishHost{}
		if err := s.Reader.Get(ctx, key, h); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return h, nil
	})
	var res singleflight.Result
	select {
	case res = <-ch:
	case <-ctx.Done():
		return nil, ctx.Err() // the client gave up: leave now, the read goes on for the others
	}
	if res.Err != nil {
		return nil, res.Err
	}
	if h, _ := res.Val.(*infrav1.RedfishHost); h != nil && allows(h) {
		return h, nil
	}
	s.refusedMu.Lock()
	defer s.refusedMu.Unlock()
	if s.refused == nil {
		s.refused = map[refusalKey]time.Time{}
	}
	s.refused[refusal] = now
	return nil, nil
}

// pxeClaim says whether h has a claim booting by PXE that is not being released.
func pxeClaim(h *infrav1.RedfishHost) bool {
	return h != nil && h.Status.Claim != nil && h.Status.Claim.BootMethod == infrav1.BootMethodPXE && !h.Status.Claim.Release
}

// refusalPurpose is what a request asked of a host: the seed of a machine, or an iPXE script.
type refusalPurpose struct {
	machine string
	ipxe    bool
}

type refusalKey struct {
	host    client.ObjectKey
	purpose refusalPurpose
}

// refusalRecheck is how long a refusal the API server confirmed is kept; hostReadRate and
// hostReadBurst bound the host reads refusals take, for all requests together.
const (
	refusalRecheck = time.Second
	hostReadRate   = 5
	hostReadBurst  = 20
)

func (s *Server) now() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

func (s *Server) hostReads() *rate.Limiter {
	s.hostReadsOnce.Do(func() { s.hostReadLimit = rate.NewLimiter(hostReadRate, hostReadBurst) })
	return s.hostReadLimit
}

// seed returns the seed Secret of machine, nil when there is none.
func (s *Server) seed(ctx context.Context, ns, machine string) (*corev1.Secret, error) {
	sec, _, err := s.seedAndToken(ctx, ns, machine)
	return sec, err
}

// seedAndToken returns the seed Secret of machine and the hash of its token. The Secret must be
// listed by the metadata cache (of SecretType) and controlled by the RedfishMachine named
// machine; it is read from the API server only when its version is not in memory yet, once
// however many requests ask at the same time.
func (s *Server) seedAndToken(ctx context.Context, ns, machine string) (*corev1.Secret, [sha256.Size]byte, error) {
	var none [sha256.Size]byte
	key := client.ObjectKey{Namespace: ns, Name: SecretName(machine)}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := s.Seeds.Get(ctx, key, meta); err != nil {
		if apierrors.IsNotFound(err) {
			s.forgetSeed(key)
			return nil, none, nil
		}
		return nil, none, err
	}
	if !ownedBy(meta, machine) {
		return nil, none, nil
	}
	if r := s.cachedSeed(key, meta.ResourceVersion); r != nil {
		return r.secret, r.token, nil
	}
	v, err, _ := s.reading.Do(key.String()+"@"+meta.ResourceVersion, func() (any, error) {
		// Shared by every request waiting for it: not cancelled with the first one.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		sec := &corev1.Secret{}
		if err := s.Reader.Get(ctx, key, sec); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		if sec.Type != SecretType || !ownedBy(sec, machine) || len(sec.Data[KeyToken]) == 0 {
			return nil, nil
		}
		r := &readSeed{secret: sec, token: sha256.Sum256(sec.Data[KeyToken]), read: time.Now()}
		s.rememberSeed(key, r)
		return r, nil
	})
	if err != nil {
		return nil, none, err
	}
	r, _ := v.(*readSeed)
	if r == nil {
		return nil, none, nil // gone, or not a seed
	}
	return r.secret, r.token, nil
}

// ownedBy tells whether a RedfishMachine named machine controls o (of any version of our API).
func ownedBy(o metav1.Object, machine string) bool {
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil || ref.Kind != "RedfishMachine" || ref.Name != machine {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == infrav1.GroupVersion.Group
}

func (s *Server) cachedSeed(key client.ObjectKey, version string) *readSeed {
	s.seedsMu.Lock()
	defer s.seedsMu.Unlock()
	r := s.seeds[key]
	if r == nil || r.secret.ResourceVersion != version || time.Since(r.read) >= seedTTL {
		return nil
	}
	return r
}

func (s *Server) rememberSeed(key client.ObjectKey, r *readSeed) {
	s.seedsMu.Lock()
	defer s.seedsMu.Unlock()
	if s.seeds == nil {
		s.seeds = map[client.ObjectKey]*readSeed{}
	}
	for k, v := range s.seeds {
		if time.Since(v.read) >= seedTTL {
			delete(s.seeds, k)
		}
	}
	s.seeds[key] = r
}

func (s *Server) forgetSeed(key client.ObjectKey) {
	s.seedsMu.Lock()
	defer s.seedsMu.Unlock()
	delete(s.seeds, key)
}
