// Package simcli is the redfish-sim command: it runs a fleet of simulated Redfish servers and
// either prints their addresses or RedfishHost manifests, or (with --kubeconfig) registers them
// in a cluster and runs their simulated OS, so they serve Machines like the servers of `make dev`.
package simcli

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// FleetLabel marks the RedfishHosts and Secrets registered by one redfish-sim run (value: the
// name prefix), so they can be found and deleted together.
const FleetLabel = "simulator.caprf.dev/fleet"

// options are the command's flags.
type options struct {
	profiles     string
	profileList  []simulator.Profile
	servers      int
	prefix       string
	fleet        int
	powerLatency time.Duration
	taskDuration time.Duration
	tls          bool
	manifests    bool
	namespace    string
	kubeconfig   string
	seedURL      string
	fleetRandom  bool // --fleet not given
}

// Run runs the command with args until ctx ends. It prints to stdout what the user asked for and
// progress to stderr.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redfish-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.servers, "servers", 5, "Number of simulated servers.")
	fs.StringVar(&o.prefix, "prefix", "", "Servers are named <prefix>-<n>. Default: sim-<4 random hex digits>, unique per run.")
	fs.IntVar(&o.fleet, "fleet", -1, "Fleet number 0-65535 that makes MACs and UUIDs unique across fleets (make dev's own servers are fleet 0). Default: random 1-65535, one no registered host uses with --kubeconfig.")
	fs.DurationVar(&o.powerLatency, "power-latency", 2*time.Second, "How long a power transition takes.")
	fs.DurationVar(&o.taskDuration, "task-duration", 10*time.Second, "How long a firmware update task runs.")
	fs.StringVar(&o.profiles, "profiles", "dmtf", "Comma-separated BMC profiles given to the servers in turn, a mixed fleet: "+strings.Join(simulator.ProfileNames(), ", ")+".")
	fs.BoolVar(&o.tls, "tls", false, "Serve HTTPS with self-signed certificates (hosts then set insecureSkipVerify).")
	fs.BoolVar(&o.manifests, "manifests", false, "Print RedfishHost and credentials Secret manifests (no namespace: kubectl's applies) instead of a table.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Register the servers as RedfishHosts in this cluster and run their simulated OS, which registers Nodes there (the workload cluster of `make dev` is its own API server).")
	fs.StringVar(&o.namespace, "namespace", "", "Namespace of the RedfishHosts (with --kubeconfig: default the kubeconfig context's namespace, `demo` for make dev).")
	fs.StringVar(&o.seedURL, "seed-url", "", "With --kubeconfig: the provider's seed URL, where servers booting by PXE fetch their iPXE script (make dev prints it).")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: redfish-sim [flags]

Runs simulated Redfish servers on loopback until Ctrl-C. Without --kubeconfig it prints their
addresses (or, with --manifests, RedfishHost manifests); with --kubeconfig it registers them and
runs their simulated OS, e.g. to add servers to a running make dev:

  go run ./cmd/redfish-sim --kubeconfig ~/.cache/caprf/dev/kubeconfig --servers 2

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := o.complete(); err != nil {
		return err
	}
	var c client.Client
	if o.kubeconfig != "" {
		var err error
		if c, err = o.connect(ctx); err != nil {
			return err
		}
	}

	fleet, err := simulator.StartFleet(simulator.FleetOptions{
		Servers: o.servers, NamePrefix: o.prefix, Fleet: uint16(o.fleet), //nolint:gosec // checked to be 0-65535.
		PowerLatency: o.powerLatency, TaskDuration: o.taskDuration, TLS: o.tls, IPXEChainURL: o.ipxeChainURL(), Profiles: o.profileList,
	})
	if err != nil {
		return err
	}
	defer fleet.Close()

	switch {
	case c != nil:
		if err := o.register(ctx, c, fleet, stderr); err != nil {
			return err
		}
	case o.manifests:
		for _, s := range fleet.Servers {
			printManifests(stdout, s, o)
		}
	default:
		for _, s := range fleet.Servers {
			user, pass := s.Credentials()
			fmt.Fprintf(stdout, "%-12s %s  user=%s password=%s profile=%s\n", s.ID(), s.Address(), user, pass, s.Profile().Name)
		}
	}
	fmt.Fprintf(stderr, "redfish-sim: %d servers %s-0…%d up (fleet %d); they run in the foreground until Ctrl-C\n", len(fleet.Servers), o.prefix, len(fleet.Servers)-1, o.fleet)
	<-ctx.Done()
	if o.kubeconfig != "" {
		fmt.Fprintf(stderr, "redfish-sim: servers stopped; their RedfishHosts stay registered: kubectl -n %s delete redfishhosts,secrets -l %s=%s\n", o.namespace, FleetLabel, o.prefix)
	}
	return nil
}

// ipxeChainURL is where the servers' firmware fetches its iPXE script on a network boot (what
// DHCP would point it at): the seed server's iPXE endpoint.
func (o *options) ipxeChainURL() string {
	if o.seedURL == "" {
		return ""
	}
	return strings.TrimSuffix(o.seedURL, "/") + "/v1/ipxe"
}

func (o *options) complete() error {
	if o.servers < 1 || o.servers > 65536 {
		return fmt.Errorf("--servers %d: must be between 1 and 65536", o.servers)
	}
	var err error
	if o.profileList, err = simulator.ParseProfiles(o.profiles); err != nil {
		return fmt.Errorf("--profiles: %w", err)
	}
	var random [4]byte
	if _, err := rand.Read(random[:]); err != nil {
		return err
	}
	if o.prefix == "" {
		o.prefix = fmt.Sprintf("sim-%02x%02x", random[0], random[1])
	}
	switch {
	case o.fleet == -1:
		o.fleet = 1 + (int(random[2])<<8|int(random[3]))%65535
		o.fleetRandom = true
	case o.fleet < 0 || o.fleet > 65535:
		return fmt.Errorf("--fleet %d: must be between 0 and 65535", o.fleet)
	}
	if o.manifests && o.kubeconfig != "" {
		return errors.New("--manifests and --kubeconfig exclude each other: print manifests, or register the servers")
	}
	return nil
}

// connect reads --kubeconfig and its namespace, and makes sure no registered host already uses
// this run's fleet number (a random one is drawn again; an explicit one is refused).
func (o *options) connect(ctx context.Context) (client.Client, error) {
	loading := &clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading --kubeconfig: %w", err)
	}
	if o.namespace == "" {
		if o.namespace, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("reading the namespace of --kubeconfig: %w", err)
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := infrav1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	hosts := &infrav1.RedfishHostList{}
	if err := c.List(ctx, hosts); err != nil {
		return nil, fmt.Errorf("listing the registered RedfishHosts: %w", err)
	}
	used := map[int]bool{}
	for _, h := range hosts.Items {
		if f, ok := simulator.FleetOfMAC(h.Spec.BootMACAddress); ok {
			used[int(f)] = true
		}
	}
	for used[o.fleet] {
		if !o.fleetRandom {
			return nil, fmt.Errorf("--fleet %d: registered RedfishHosts already use its MACs; pick another", o.fleet)
		}
		o.fleet = 1 + (o.fleet % 65535)
	}
	return c, nil
}

// register creates a credentials Secret and a RedfishHost for every server (never overwriting
// an existing one) and attaches the simulated OS, which writes Nodes with the same client.
func (o *options) register(ctx context.Context, c client.Client, fleet *simulator.Fleet, stderr io.Writer) error {
	simos.New(c).Attach(fleet)
	for _, s := range fleet.Servers {
		secret, host := o.objects(s)
		for _, obj := range []client.Object{secret, host} {
			if err := c.Create(ctx, obj); err != nil {
				return fmt.Errorf("registering %s: creating %T %s/%s (redfish-sim never overwrites; pick another --prefix): %w", s.ID(), obj, o.namespace, obj.GetName(), err)
			}
		}
		fmt.Fprintf(stderr, "redfish-sim: registered RedfishHost %s/%s (%s, boot MAC %s)\n", o.namespace, host.Name, s.Address(), s.MACs()[0])
	}
	return nil
}

// objects returns the credentials Secret and the RedfishHost that register s.
func (o *options) objects(s *simulator.Server) (*corev1.Secret, *infrav1.RedfishHost) {
	user, pass := s.Credentials()
	labels := map[string]string{FleetLabel: o.prefix}
	secretLabels := map[string]string{FleetLabel: o.prefix, clusterctlv1.ClusterctlMoveLabel: "", infrav1.BMCCredentialsLabel: "true"}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.namespace, Name: s.ID() + "-bmc", Labels: secretLabels},
		StringData: map[string]string{"username": user, "password": pass},
	}
	host := &infrav1.RedfishHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.namespace, Name: s.ID(), Labels: labels},
		Spec: infrav1.RedfishHostSpec{
			BMC:            infrav1.BMC{Address: s.Address(), CredentialsName: secret.Name, InsecureSkipVerify: o.tls},
			BootMACAddress: s.MACs()[0],
		},
	}
	return secret, host
}

// printManifests prints the Secret and RedfishHost of s. Without --namespace they carry none, so
// `kubectl apply -f` puts them in the current context's namespace.
func printManifests(w io.Writer, s *simulator.Server, o options) {
	user, pass := s.Credentials()
	ns := ""
	if o.namespace != "" {
		ns = "\n  namespace: " + o.namespace
	}
	fmt.Fprintf(w, `---
apiVersion: v1
kind: Secret
metadata:
  name: %[1]s-bmc%[2]s
  labels:
    clusterctl.cluster.x-k8s.io/move: ""
    %[3]s: %[4]s
stringData:
  username: %[5]s
  password: %[6]s
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: RedfishHost
metadata:
  name: %[1]s%[2]s
  labels:
    %[3]s: %[4]s
spec:
  bmc:
    address: %[7]s
    credentialsName: %[1]s-bmc
    insecureSkipVerify: %[8]t
  bootMACAddress: "%[9]s"
`, s.ID(), ns, FleetLabel, o.prefix, user, pass, s.Address(), o.tls, s.MACs()[0])
}

// Main is the command's entry point.
func Main(ctx context.Context) int {
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, "redfish-sim:", err)
		return 2
	}
	return 0
}
