package webhooks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
)

func host(address string, claim *infrav1.HostClaim) *infrav1.RedfishHost {
	return &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Name: "rack1-u07", Namespace: "fleet"},
		Spec:       infrav1.RedfishHostSpec{BMC: infrav1.BMC{Address: address, CredentialsName: "rack1-u07-bmc"}},
		Status:     infrav1.RedfishHostStatus{State: infrav1.HostStateProvisioned, Claim: claim},
	}
}

func reserved(h *infrav1.RedfishHost) *infrav1.RedfishHost {
	h.Status.ReservedFor = &infrav1.ObjectRef{Kind: "MachineDeployment", Name: "workers"}
	return h
}

func TestHostAddressIsCheckedWithoutEchoingCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, address string
		wantErr       string // "" = accepted
		mustNotEcho   []string
	}{
		{name: "system path", address: "redfish://10.0.0.57/redfish/v1/Systems/1"},
		{name: "service root only", address: "redfish+https://bmc.rack1:8443"},
		{name: "wrong scheme", address: "ipmi://10.0.0.57", wantErr: "scheme must be"},
		{name: "manager path", address: "redfish://10.0.0.57/redfish/v1/Managers/1", wantErr: "the path must be"},
		{name: "user and password in the URL", address: "redfish://opsadmin:hunter2@10.0.0.57", wantErr: "must not carry credentials", mustNotEcho: []string{"hunter2", "opsadmin"}},
		{name: "user only in the URL", address: "redfish://opsadmin@10.0.0.57", wantErr: "must not carry credentials", mustNotEcho: []string{"opsadmin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&Host{}).ValidateCreate(t.Context(), host(tc.address, nil))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			}
			for _, secret := range tc.mustNotEcho {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error echoes %q: %v", secret, err)
				}
			}
		})
	}
}

func TestClaimedHostCannotBeRepointedAtAnotherBMC(t *testing.T) {
	claim := &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Name: "workers-abc12"}}
	const before, after = "redfish://10.0.0.57/redfish/v1/Systems/1", "redfish://10.0.0.99/redfish/v1/Systems/1"
	for _, tc := range []struct {
		name     string
		old      *infrav1.RedfishHost
		newAddr  string
		wantErr  string
		accepted bool
	}{
		{name: "claimed, address changed", old: host(before, claim), newAddr: after, wantErr: "cannot change while the host is claimed by RedfishMachine workers-abc12"},
		{name: "claimed, address unchanged", old: host(before, claim), newAddr: before, accepted: true},
		{name: "not claimed, address changed", old: host(before, nil), newAddr: after, accepted: true},
		{name: "reserved for nodeReuse, address changed", old: reserved(host(before, nil)), newAddr: after, wantErr: "cannot change while the host is reserved for MachineDeployment workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			updated := tc.old.DeepCopy()
			updated.Spec.BMC.Address = tc.newAddr
			_, err := (&Host{}).ValidateUpdate(t.Context(), tc.old, updated)
			if tc.accepted {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestOneServerIsRegisteredOnce(t *testing.T) {
	existing := host("redfish://10.0.0.57/redfish/v1/Systems/1", nil)
	existing.Namespace, existing.Name = "rack1", "u07"
	existing.Spec.BootMACAddress = "52:54:00:00:07:01"
	for _, mode := range []struct {
		name string
		host func(apiServer *countingReader) *Host
	}{
		{name: "hosts listed from the API server (a manager watching one namespace)", host: func(apiServer *countingReader) *Host { return &Host{Reader: apiServer} }},
		{name: "hosts looked up in the cache by identity", host: func(apiServer *countingReader) *Host {
			return &Host{Reader: apiServer, Hosts: indexedHosts(t, existing)}
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			v := mode.host(apiServerWith(t, existing))
			for _, tc := range []struct {
				name, address, mac string
				wantErr            string // "" = accepted
			}{
				{name: "same system, other namespace", address: "redfish://10.0.0.57/redfish/v1/Systems/1", wantErr: "RedfishHost rack1/u07 already manages this BMC system"},
				{name: "same BMC, system discovered", address: "redfish+https://10.0.0.57:443", wantErr: "RedfishHost rack1/u07 already manages this BMC system"},
				{name: "same BMC, another system (a blade chassis)", address: "redfish://10.0.0.57/redfish/v1/Systems/2"},
				{name: "same boot MAC, other case", address: "redfish://10.0.0.58", mac: "52:54:00:00:07:01", wantErr: "RedfishHost rack1/u07 already boots from this MAC"},
				{name: "another server", address: "redfish://10.0.0.58", mac: "52:54:00:00:08:01"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					h := host(tc.address, nil)
					h.Name = tc.name // each an admission of its own host
					h.Spec.BootMACAddress = strings.ToUpper(tc.mac)
					_, err := v.ValidateCreate(t.Context(), h)
					switch {
					case tc.wantErr == "" && err != nil:
						t.Fatalf("refused: %v", err)
					case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
						t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
					}
				})
			}
			t.Run("updates that keep the identity are not checked (hosts registered before the check keep working)", func(t *testing.T) {
				dup := host("redfish://10.0.0.57/redfish/v1/Systems/1", nil)
				updated := dup.DeepCopy()
				updated.Labels = map[string]string{"rack": "1"}
				if _, err := v.ValidateUpdate(t.Context(), dup, updated); err != nil {
					t.Fatalf("refused: %v", err)
				}
			})
		})
	}
}

// At N = 1000 a list of every host per admission made registering a fleet quadratic: the API
// server serialized half a million hosts, and the webhook timed out.
func TestTheDuplicateCheckListsNoHostsFromTheAPIServerWhenTheCacheSeesEveryNamespace(t *testing.T) {
	existing := host("redfish://10.0.0.57/redfish/v1/Systems/1", nil)
	existing.Namespace, existing.Name = "rack1", "u07"
	apiServer := apiServerWith(t, existing)
	v := &Host{Reader: apiServer, Hosts: indexedHosts(t, existing)}
	for i := range 20 {
		h := host(fmt.Sprintf("redfish://10.0.1.%d", i), nil)
		h.Name = fmt.Sprintf("u%02d", i)
		if _, err := v.ValidateCreate(t.Context(), h); err != nil {
			t.Fatalf("refused: %v", err)
		}
	}
	if apiServer.lists != 0 {
		t.Fatalf("%d lists of hosts from the API server for 20 admissions, want 0", apiServer.lists)
	}
	if apiServer.gets != 0 {
		t.Fatalf("%d reads of hosts from the API server for 20 admissions of new servers, want 0 (only candidates are read)", apiServer.gets)
	}
}

// kubectl apply creates one host after another, milliseconds apart: the second is checked
// before the cache has the first.
func TestAHostAdmittedMomentsAgoIsADuplicateBeforeTheCacheHasIt(t *testing.T) {
	first := host("redfish://10.0.0.57", nil)
	first.Name = "u07"
	first.Spec.BootMACAddress = "52:54:00:00:07:01"
	apiServer := apiServerWith(t)
	v := &Host{Reader: apiServer, Hosts: indexedHosts(t)}
	if _, err := v.ValidateCreate(t.Context(), first); err != nil {
		t.Fatalf("refused: %v", err)
	}

	again := host("redfish://10.0.0.57/redfish/v1/Systems/1", nil)
	again.Name = "u07-again"
	if _, err := v.ValidateCreate(t.Context(), again); err != nil {
		t.Fatalf("refused while the first host was not stored (admission is not storage): %v", err)
	}

	if err := apiServer.Create(t.Context(), first.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	for _, dup := range []*infrav1.RedfishHost{again, host("redfish://10.0.0.58", nil)} {
		if dup.Spec.BMC.Address == "redfish://10.0.0.58" {
			dup.Name, dup.Spec.BootMACAddress = "u08", "52:54:00:00:07:01"
		}
		_, err := v.ValidateCreate(t.Context(), dup)
		if err == nil || !strings.Contains(err.Error(), "RedfishHost fleet/u07 already") {
			t.Fatalf("%s: want it refused as a duplicate of fleet/u07, got %v", dup.Name, err)
		}
	}
}

// A manager starting serves its webhooks before its cache has started: duplicates are still
// found, from the API server.
func TestTheDuplicateCheckAsksTheAPIServerUntilTheCacheHasStarted(t *testing.T) {
	existing := host("redfish://10.0.0.57/redfish/v1/Systems/1", nil)
	existing.Namespace, existing.Name = "rack1", "u07"
	v := &Host{Reader: apiServerWith(t, existing), Hosts: notStartedCache{}}
	dup := host("redfish://10.0.0.57", nil)
	if _, err := v.ValidateCreate(t.Context(), dup); err == nil || !strings.Contains(err.Error(), "RedfishHost rack1/u07 already manages this BMC system") {
		t.Fatalf("want it refused as a duplicate of rack1/u07, got %v", err)
	}
}

type notStartedCache struct{ client.Reader }

func (notStartedCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return &cache.ErrCacheNotStarted{}
}

// Admissions are remembered for recentFor, then forgotten (the cache has had them for long).
func TestAnAdmittedHostIsRememberedFor30Seconds(t *testing.T) {
	var r recentHosts
	h := host("redfish://10.0.0.57", nil)
	t0 := time.Now()
	r.add(h, t0)
	keys := identityKeys(h)
	if got := r.matching(keys, t0.Add(recentFor)); len(got) != 1 {
		t.Fatalf("after %s: %v, want the host", recentFor, got)
	}
	if got := r.matching(keys, t0.Add(recentFor+time.Second)); len(got) != 0 || len(r.entries) != 0 {
		t.Fatalf("after %s: %v (%d kept), want it forgotten", recentFor+time.Second, got, len(r.entries))
	}
}

// countingReader is the API server: it counts the hosts listed and read, and the Secrets read.
type countingReader struct {
	client.Client
	lists, gets, secretGets int
}

func (c *countingReader) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if _, ok := l.(*infrav1.RedfishHostList); ok {
		c.lists++
	}
	return c.Client.List(ctx, l, opts...)
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	switch o.(type) {
	case *infrav1.RedfishHost:
		c.gets++
	case *corev1.Secret:
		c.secretGets++
	}
	return c.Client.Get(ctx, key, o, opts...)
}

func apiServerWith(t *testing.T, hosts ...*infrav1.RedfishHost) *countingReader {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(scheme(t))
	for _, h := range hosts {
		b = b.WithObjects(h.DeepCopy())
	}
	return &countingReader{Client: b.Build()}
}

// indexedHosts is the manager's cache, with the identity index Setup registers.
func indexedHosts(t *testing.T, hosts ...*infrav1.RedfishHost) client.Reader {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(scheme(t)).WithIndex(&infrav1.RedfishHost{}, HostIdentityIndex, IndexHostIdentity)
	for _, h := range hosts {
		b = b.WithObjects(h.DeepCopy())
	}
	return b.Build()
}

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := infrav1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOnlyANewHostOrAChangedBMCReadsTheCredentialsSecret(t *testing.T) {
	registered := host("redfish://10.0.0.57/redfish/v1/Systems/1", nil)
	registered.Spec.BootMACAddress = "52:54:00:00:07:01"
	for _, tc := range []struct {
		name   string
		update func(h *infrav1.RedfishHost)
		create bool
		reads  int // Secret reads from the API server
	}{
		{name: "a new host", create: true, reads: 1},
		{name: "a finalizer added", update: func(h *infrav1.RedfishHost) {
			h.Finalizers = append(h.Finalizers, "redfishhost.infrastructure.cluster.x-k8s.io")
		}},
		{name: "a reboot request", update: func(h *infrav1.RedfishHost) {
			h.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "remediation/workers-abc12"}}
		}},
		{name: "the credentials Secret renamed", update: func(h *infrav1.RedfishHost) { h.Spec.BMC.CredentialsName = "rack1-u07-bmc-2" }, reads: 1},
		{name: "the BMC address changed", update: func(h *infrav1.RedfishHost) { h.Spec.BMC.Address = "redfish://10.0.0.58/redfish/v1/Systems/1" }, reads: 1},
		{name: "the BMC auth method changed", update: func(h *infrav1.RedfishHost) { h.Spec.BMC.AuthMethod = infrav1.BMCAuthBasic }, reads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apiServer := apiServerWith(t) // no Secret: a read warns about it
			v := &Host{Reader: apiServer, Hosts: indexedHosts(t)}
			var warnings admission.Warnings
			var err error
			if tc.create {
				warnings, err = v.ValidateCreate(t.Context(), registered.DeepCopy())
			} else {
				updated := registered.DeepCopy()
				tc.update(updated)
				warnings, err = v.ValidateUpdate(t.Context(), registered, updated)
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if apiServer.secretGets != tc.reads {
				t.Errorf("%d Secret reads from the API server, want %d", apiServer.secretGets, tc.reads)
			}
			warned := len(warnings) > 0 && strings.Contains(strings.Join(warnings, " "), "does not exist yet")
			if warned != (tc.reads > 0) {
				t.Errorf("warnings %q, want the missing Secret warned about: %v", warnings, tc.reads > 0)
			}
		})
	}
}

func TestBasicAuthOverPlainHTTPIsWarnedAbout(t *testing.T) {
	for _, tc := range []struct {
		address string
		method  infrav1.BMCAuthMethod
		warn    bool
	}{
		{"redfish+http://10.0.0.57", infrav1.BMCAuthBasic, true},
		{"redfish://10.0.0.57", infrav1.BMCAuthBasic, false},
		{"redfish+http://10.0.0.57", infrav1.BMCAuthSession, false},
	} {
		h := host(tc.address, nil)
		h.Spec.BMC.AuthMethod = tc.method
		warnings, err := (&Host{}).ValidateCreate(t.Context(), h)
		if err != nil {
			t.Fatalf("%s %s refused: %v", tc.address, tc.method, err)
		}
		if got := len(warnings) > 0 && strings.Contains(warnings[0], "in clear"); got != tc.warn {
			t.Errorf("%s with %s: warnings %v, want a warning: %v", tc.address, tc.method, warnings, tc.warn)
		}
	}
}

func TestServiceBootIsAnHTTPImageAndOnlyAMaintenanceBootsAClaimedHost(t *testing.T) {
	claim := &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Name: "workers-abc12"}}
	for _, tc := range []struct {
		name      string
		claim     *infrav1.HostClaim
		boot      infrav1.ServiceBoot
		wantErr   string
		mustNotEc string
	}{
		{name: "an unclaimed host, an https image", boot: infrav1.ServiceBoot{Requestor: "dc-ops", Image: "https://images.example/diag.iso"}},
		{name: "a claimed host, a maintenance's image", claim: claim, boot: infrav1.ServiceBoot{Requestor: "maintenance/nic", Image: "https://images.example/diag.iso"}},
		{name: "a claimed host, someone else's image", claim: claim, boot: infrav1.ServiceBoot{Requestor: "dc-ops", Image: "https://images.example/diag.iso"},
			wantErr: "would power it off without a drain"},
		{name: "not http", boot: infrav1.ServiceBoot{Requestor: "dc-ops", Image: "nfs://ops:hunter2@images.example/diag.iso"},
			wantErr: "must be an http or https URL", mustNotEc: "hunter2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := host("redfish://10.0.0.57/redfish/v1/Systems/1", tc.claim)
			h.Spec.ServiceBoot = &tc.boot
			_, err := (&Host{}).ValidateCreate(t.Context(), h)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			case tc.mustNotEc != "" && strings.Contains(err.Error(), tc.mustNotEc):
				t.Errorf("the error echoes %q: %v", tc.mustNotEc, err)
			}
		})
	}
}

func TestAnUnchangedServiceBootDoesNotBlockOtherUpdates(t *testing.T) {
	claim := &infrav1.HostClaim{Consumer: infrav1.ObjectRef{Kind: "RedfishMachine", Name: "workers-abc12"}}
	old := host("redfish://10.0.0.57/redfish/v1/Systems/1", claim)
	old.Spec.ServiceBoot = &infrav1.ServiceBoot{Requestor: "dc-ops", Image: "https://images.example/diag.iso"} // from before the rule
	updated := old.DeepCopy()
	updated.Spec.RebootRequests = []infrav1.RebootRequest{{Requestor: "remediation/r1", Mode: infrav1.RebootModeHard}}
	if _, err := (&Host{}).ValidateUpdate(t.Context(), old, updated); err != nil {
		t.Fatalf("a reboot request refused because of an unchanged service boot: %v", err)
	}
}

// A RedfishJob with a timeout under a second, a media URL without a host or with credentials, or
// a TTL beyond 30 days is refused, naming the field; the credentials are not echoed back.
func TestJobValidation(t *testing.T) {
	job := func(mut func(*infrav1.RedfishJob)) *infrav1.RedfishJob {
		j := &infrav1.RedfishJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j"},
			Spec: infrav1.RedfishJobSpec{HostName: "h", Tasks: []infrav1.JobTask{{Power: infrav1.JobPowerOn}}}}
		mut(j)
		return j
	}
	for name, tc := range map[string]struct {
		j    *infrav1.RedfishJob
		want string
	}{
		"ok": {job(func(*infrav1.RedfishJob) {}), ""},
		"timeout": {job(func(j *infrav1.RedfishJob) { j.Spec.Tasks[0].Timeout = &metav1.Duration{Duration: time.Millisecond} }),
			"spec.tasks[0].timeout: Invalid value: \"1ms\": must be at least 1s"},
		"no host": {job(func(j *infrav1.RedfishJob) {
			j.Spec.Tasks[0] = infrav1.JobTask{InsertMedia: &infrav1.JobMedia{URL: "https://"}}
		}),
			"spec.tasks[0].insertMedia.url: Invalid value: \"https://\": must be an http or https URL with a host"},
		"credentials": {job(func(j *infrav1.RedfishJob) {
			j.Spec.Tasks[0] = infrav1.JobTask{InsertMedia: &infrav1.JobMedia{URL: "https://admin:s3cret@images.example/x.iso"}}
		}), "must not carry credentials"},
		"fallback longer than the timeout": {job(func(j *infrav1.RedfishJob) {
			j.Spec.Tasks[0] = infrav1.JobTask{WaitForBootProgress: &infrav1.JobBootProgress{State: "SetupEntered", OrAfter: &metav1.Duration{Duration: 10 * time.Minute}}}
		}), "spec.tasks[0].waitForBootProgress.orAfter: Invalid value: \"10m0s\": must be positive and shorter than the task's timeout (5m0s)"},
		"ttl": {job(func(j *infrav1.RedfishJob) { j.Spec.TTLAfterFinished = &metav1.Duration{Duration: 31 * 24 * time.Hour} }),
			"spec.ttlAfterFinished: Invalid value: \"744h0m0s\": must be between 0 and 720h"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := (&Job{}).ValidateCreate(context.Background(), tc.j)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error echoes the password: %v", err)
			}
		})
	}
}

// A host naming a Secret that is not labelled as BMC credentials is refused (anyone who may edit
// hosts could otherwise have any Secret of the namespace sent to a server of theirs); a labelled
// one is admitted, and a Secret that does not exist yet is only warned about.
func TestAHostNamingAnUnlabelledSecretIsRefused(t *testing.T) {
	h := host("redfish://10.0.0.57/redfish/v1/Systems/1", nil)
	h.Spec.BootMACAddress = "52:54:00:00:07:01"
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string // "" admitted
	}{
		{name: "unlabelled", want: `lacks the label caprf.io/bmc-credentials: "true"`},
		{name: "labelled false", labels: map[string]string{infrav1.BMCCredentialsLabel: "false"}, want: "lacks the label"},
		{name: "labelled", labels: map[string]string{infrav1.BMCCredentialsLabel: "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := apiServerWith(t)
			if err := api.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: h.Spec.BMC.CredentialsName, Labels: tc.labels},
				Data: map[string][]byte{"username": []byte("admin"), "password": []byte("s3cr3t-marker")}}); err != nil {
				t.Fatal(err)
			}
			v := &Host{Reader: api, Hosts: indexedHosts(t)}
			_, err := v.ValidateCreate(t.Context(), h.DeepCopy())
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("admitted or refused for another reason (%v), want %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "s3cr3t-marker"):
				t.Fatalf("the refusal echoes the Secret's data: %v", err)
			}
			// Moved to another Secret later: checked again.
			renamed := h.DeepCopy()
			renamed.Spec.BMC.CredentialsName = "other"
			if err := api.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: "other"}, Data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}}); err != nil {
				t.Fatal(err)
			}
			if _, err := v.ValidateUpdate(t.Context(), h, renamed); err == nil || !strings.Contains(err.Error(), "lacks the label") {
				t.Errorf("re-pointed at an unlabelled Secret: %v, want refused", err)
			}
		})
	}
}

// A providerID on a new RedfishMachine restores a claim, so it is admitted only on the restore
// path: it names a host of the namespace whose claim record names this machine. A template never
// carries one.
func TestAProviderIDOnANewMachineMustNameAHostThatRecordsIt(t *testing.T) {
	recorded := func(by string) *infrav1.RedfishHost {
		h := host("redfish://10.0.0.57/redfish/v1/Systems/1", nil)
		h.Namespace = "ns"
		if by != "" {
			h.Annotations = map[string]string{infrav1.HostClaimedByAnnotation: by}
		}
		return h
	}
	machine := func(providerID string) *infrav1.RedfishMachine {
		return &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1"},
			Spec: infrav1.RedfishMachineSpec{ProviderID: providerID, Image: &infrav1.Image{URL: "https://images.example/os.iso"}}}
	}
	id := claim.ProviderID("ns", "rack1-u07", "m1")
	for _, tc := range []struct {
		name  string
		hosts []*infrav1.RedfishHost
		m     *infrav1.RedfishMachine
		want  string // "" admitted
	}{
		{name: "no providerID", m: machine("")},
		{name: "the host records this machine (a move or restore)", hosts: []*infrav1.RedfishHost{recorded("m1")}, m: machine(id)},
		{name: "the host records no claim (Available, or reserved)", hosts: []*infrav1.RedfishHost{recorded("")}, m: machine(id), want: "does not name this machine"},
		{name: "the host recreated moments ago without any record (moved from an older release): admitted, warned about", hosts: []*infrav1.RedfishHost{func() *infrav1.RedfishHost {
			h := recorded("")
			h.Status.State = ""
			return h
		}()}, m: machine(id)},
		{name: "the host records another machine", hosts: []*infrav1.RedfishHost{recorded("m2")}, m: machine(id), want: "does not name this machine"},
		{name: "no such host yet (a restore recreating machines first): admitted, warned about", m: machine(id)},
		{name: "not a providerID of this namespace", hosts: []*infrav1.RedfishHost{recorded("m1")}, m: machine(claim.ProviderID("other", "rack1-u07", "m1")), want: "leave it empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &Machine{Reader: apiServerWith(t, tc.hosts...)}
			_, err := v.ValidateCreate(t.Context(), tc.m)
			if tc.want == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "spec.providerID")) {
				t.Fatalf("got %v, want refused on spec.providerID: %q", err, tc.want)
			}
		})
	}
	tmpl := &infrav1.RedfishMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t"}}
	tmpl.Spec.Template.Spec = machine(id).Spec
	if _, err := (&MachineTemplate{}).ValidateCreate(t.Context(), tmpl); err == nil || !strings.Contains(err.Error(), "spec.template.spec.providerID") {
		t.Errorf("a template with a providerID: %v, want refused", err)
	}
}

func TestAnImageIsRefusedUnlessItsFormatIsKnownAndADiskImageHasAChecksum(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		img  infrav1.Image
		boot infrav1.BootMethod
		want string // "" when admitted
	}{
		{"a live ISO by its extension", infrav1.Image{URL: "https://img/x.iso"}, "", ""},
		{"a raw image with a digest", infrav1.Image{URL: "https://img/ubuntu-2404-kube-v1.33.raw", Checksum: sum}, "", ""},
		{"image-builder's qcow2 with a checksum file", infrav1.Image{URL: "https://img/x.qcow2", Checksum: "https://img/SHA256SUMS"}, "", ""},
		{"sha512", infrav1.Image{URL: "https://img/x.raw", Checksum: strings.Repeat("ab", 64), ChecksumType: infrav1.ChecksumSHA512}, "", ""},
		{"a .img said qcow2 (a distribution's cloud image)", infrav1.Image{URL: "https://img/noble-server-cloudimg-amd64.img", Format: infrav1.ImageFormatQCOW2, Checksum: sum}, "", ""},
		{"a .img said raw (image-builder's output)", infrav1.Image{URL: "https://img/ubuntu-2404-kube.img", Format: infrav1.ImageFormatRaw, Checksum: sum}, "", ""},
		{"a .img without a format", infrav1.Image{URL: "https://img/noble-server-cloudimg-amd64.img", Checksum: sum}, "", ".img is either raw or qcow2"},
		{"a self-installing ISO", infrav1.Image{URL: "https://img/fcos.iso", Format: infrav1.ImageFormatISO}, "", ""},
		{"no extension, no format", infrav1.Image{URL: "https://img/latest"}, "", "names no format"},
		{"compressed", infrav1.Image{URL: "https://img/x.raw.xz", Checksum: sum}, "", "names no format"},
		{"a qcow2 URL said raw", infrav1.Image{URL: "https://img/x.qcow2", Format: infrav1.ImageFormatRaw, Checksum: sum}, "", "the URL names a qcow2 image"},
		{"an ISO URL said raw", infrav1.Image{URL: "https://img/x.iso", Format: infrav1.ImageFormatRaw, Checksum: sum}, "", "the URL names a live-iso image"},
		{"a raw URL said live-iso", infrav1.Image{URL: "https://img/x.raw", Format: infrav1.ImageFormatLiveISO}, "", "the URL names a raw image"},
		{"raw without checksum", infrav1.Image{URL: "https://img/x.raw"}, "", "only once its checksum is verified"},
		{"a short digest", infrav1.Image{URL: "https://img/x.raw", Checksum: "abc"}, "", "is not a sha256 digest (64 hex digits)"},
		{"a sha256 digest said sha512", infrav1.Image{URL: "https://img/x.raw", Checksum: sum, ChecksumType: infrav1.ChecksumSHA512}, "", "is not a sha512 digest"},
		{"a checksum on a live ISO", infrav1.Image{URL: "https://img/x.iso", Checksum: sum}, "", "verified only for raw and qcow2"},
		{"a disk image by PXE", infrav1.Image{URL: "https://img/x.raw", Checksum: sum}, infrav1.BootMethodPXE, "bootMethod PXE is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := tc.img
			errs := validateSpec(&infrav1.RedfishMachineSpec{Image: &img, BootMethod: tc.boot}, field.NewPath("spec"))
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("refused: %v", errs)
			case tc.want != "" && !strings.Contains(errs.ToAggregate().Error(), tc.want):
				t.Errorf("got %v, want an error saying %q", errs, tc.want)
			}
		})
	}
}

// A raw image admitted before checksums were required keeps its machine updatable (providerID,
// approvals); a new machine with it is refused.
func TestAMachineAdmittedBeforeTheImageChecksKeepsItsUpdates(t *testing.T) {
	old := &infrav1.RedfishMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
		Spec: infrav1.RedfishMachineSpec{Image: &infrav1.Image{URL: "https://img/node.raw", Format: infrav1.ImageFormatRaw}}}
	updated := old.DeepCopy()
	updated.Spec.ProviderID = "redfish://ns/h1/m"
	if _, err := (&Machine{}).ValidateUpdate(context.Background(), old, updated); err != nil {
		t.Errorf("an update of a machine admitted before the image checks: %v", err)
	}
	if _, err := (&Machine{}).ValidateCreate(context.Background(), old); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("a new machine with a raw image and no checksum: %v, want refused", err)
	}
	changed := updated.DeepCopy()
	changed.Spec.Image.Format = infrav1.ImageFormatQCOW2
	if _, err := (&Machine{}).ValidateUpdate(context.Background(), old, changed); err == nil {
		t.Error("an image changed by an update was not checked")
	}
}

// A host stored with an address admitted by an older release (an IPv6 zone, refused now) keeps
// taking the updates controllers and operators make, its finalizer's removal included: only a
// changed address is checked.
func TestAHostWhoseAddressIsRefusedNowStaysUpdatable(t *testing.T) {
	old := host("redfish+http://[fe80::1%25eth0]:80", nil)
	old.Finalizers = []string{"redfishhost.infrastructure.cluster.x-k8s.io"}
	updated := old.DeepCopy()
	updated.Finalizers = nil
	if _, err := (&Host{}).ValidateUpdate(t.Context(), old, updated); err != nil {
		t.Fatalf("removing the finalizer of a host whose stored address is refused now: %v", err)
	}
	updated.Spec.BMC.Address = "redfish+http://[fe80::2%25eth0]:80"
	if _, err := (&Host{}).ValidateUpdate(t.Context(), old, updated); err == nil {
		t.Fatal("a changed address that is refused was admitted")
	}
}
