package provider

import (
	"strings"
	"testing"
	"time"
)

func TestLeaderElectionTimingsThatLetTwoReplicasLeadAreRefused(t *testing.T) {
	if err := DefaultLeaderElection.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		l    LeaderElection
		want string
	}{
		{LeaderElection{LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}, "must not exceed --leader-elect-lease-duration"},
		{LeaderElection{LeaseDuration: 4 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: time.Second}, "must not exceed --leader-elect-lease-duration"},
		// The leader may still believe it leads at last renewal + RetryPeriod + RenewDeadline.
		{LeaderElection{LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 500 * time.Millisecond}, "must not exceed --leader-elect-lease-duration"},
		// Kept in the Lease as 0s and 1s: every replica would see it expired.
		{LeaderElection{LeaseDuration: 900 * time.Millisecond, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}, "whole number of seconds"},
		{LeaderElection{LeaseDuration: 1500 * time.Millisecond, RenewDeadline: 1200 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}, "whole number of seconds"},
		{LeaderElection{LeaseDuration: 15 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 2 * time.Second}, "1.2 × --leader-elect-retry-period"},
		{LeaderElection{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second}, "must be positive"},
	} {
		err := c.l.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.l, err, c.want)
		}
	}
	// No time to spare between the leader's last possible renewal and another replica's takeover.
	if err := (LeaderElection{LeaseDuration: 3 * time.Second, RenewDeadline: 2499 * time.Millisecond, RetryPeriod: 500 * time.Millisecond}).Validate(); err == nil {
		t.Error("3s / 2.499s / 500ms: admitted with a millisecond to spare")
	}
	if err := (LeaderElection{LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 250 * time.Millisecond}).Validate(); err != nil {
		t.Errorf("short, consistent timings: %v", err)
	}
}

func TestTheUserAgentNamesTheReplica(t *testing.T) {
	t.Setenv("POD_NAME", "caprf-manager-7d9f-abcde")
	if got := UserAgent(); got != "cluster-api-provider-redfish (caprf-manager-7d9f-abcde)" {
		t.Errorf("UserAgent() = %q", got)
	}
	// A value a header cannot carry would make every BMC request fail: it is left out.
	for _, bad := range []string{"pod\r\nX-Evil: 1", "pod (1)"} {
		t.Setenv("POD_NAME", bad)
		if got := UserAgent(); got != "cluster-api-provider-redfish" {
			t.Errorf("POD_NAME %q: UserAgent() = %q", bad, got)
		}
	}
}
