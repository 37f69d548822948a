package provider

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// LeaderElection holds the leader election timings of the manager's flags.
type LeaderElection struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultLeaderElection are controller-runtime's (and Cluster API's) defaults: a replica that dies
// without giving the lease back is replaced after about LeaseDuration (the others poll every
// RetryPeriod, jittered: at worst a few RetryPeriods more).
var DefaultLeaderElection = LeaderElection{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// Validate refuses timings with which two replicas could both believe they lead. client-go keeps
// the lease's duration in whole seconds (rounded down) in the Lease; the leader, after its last
// renewal, waits RetryPeriod and then tries to renew for up to RenewDeadline before it stops,
// while another replica takes the lease LeaseDuration after it last saw it renewed. So the lease
// must be whole seconds, and longer than RetryPeriod + RenewDeadline with a RetryPeriod to spare
// (the last renewal's answer travels, and the leader takes a moment to stop); and the leader must
// get more than one try to renew (client-go's own rule, RetryPeriod jittered by 1.2).
func (l LeaderElection) Validate() error {
	switch {
	case l.LeaseDuration <= 0 || l.RenewDeadline <= 0 || l.RetryPeriod <= 0:
		return fmt.Errorf("leader election: --leader-elect-lease-duration (%s), --leader-elect-renew-deadline (%s) and --leader-elect-retry-period (%s) must be positive", l.LeaseDuration, l.RenewDeadline, l.RetryPeriod)
	case l.LeaseDuration%time.Second != 0:
		return fmt.Errorf("leader election: --leader-elect-lease-duration (%s) must be a whole number of seconds: the Lease keeps whole seconds and drops the rest (%s would be kept as %s), and a lease shorter than the leader's renewals lets two replicas lead", l.LeaseDuration, l.LeaseDuration, l.LeaseDuration.Truncate(time.Second))
	case 2*l.RetryPeriod+l.RenewDeadline > l.LeaseDuration:
		return fmt.Errorf("leader election: --leader-elect-renew-deadline (%s) plus twice --leader-elect-retry-period (%s) must not exceed --leader-elect-lease-duration (%s): a leader that cannot renew must stop before another replica takes over", l.RenewDeadline, l.RetryPeriod, l.LeaseDuration)
	case float64(l.RenewDeadline) <= 1.2*float64(l.RetryPeriod):
		return fmt.Errorf("leader election: --leader-elect-renew-deadline (%s) must be longer than 1.2 × --leader-elect-retry-period (%s)", l.RenewDeadline, l.RetryPeriod)
	}
	return nil
}

// UserAgent is the User-Agent the manager sends its BMCs: it names the replica (the pod's name,
// from POD_NAME as the Deployment sets it, else the host name), so that a BMC's audit log says
// which replica sent what.
func UserAgent() string {
	replica := os.Getenv("POD_NAME")
	if replica == "" {
		replica, _ = os.Hostname()
	}
	// A name a header cannot carry (a CR, a parenthesis) would make every request fail: left out.
	if replica == "" || len(replica) > 253 || strings.ContainsFunc(replica, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '.' && r != '_'
	}) {
		return "cluster-api-provider-redfish"
	}
	return "cluster-api-provider-redfish (" + replica + ")"
}
