package maintenance

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// A waiting maintenance whose reason stays the same rewrites a message whose figures moved at most
// every ten poll intervals (each rewrite is an API write, for every waiting maintenance of a
// fleet); a new reason is written at once.
func TestAWaitingMaintenanceRewritesMovingFiguresAtMostEveryTenPolls(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r := &Reconciler{PollInterval: 2 * time.Second, Now: func() time.Time { return now }}
	m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}
	message := func() string { return conditions.Get(m, infrav1.ReadyCondition).Message }

	r.waiting(m, WaitingForBudgetReason, "%d of 100 hosts unavailable", 10)
	now = now.Add(5 * time.Second)
	r.waiting(m, WaitingForBudgetReason, "%d of 100 hosts unavailable", 9)
	if got := message(); got != "10 of 100 hosts unavailable" {
		t.Errorf("5 s later: %q, want the message kept", got)
	}
	now = now.Add(16 * time.Second)
	r.waiting(m, WaitingForBudgetReason, "%d of 100 hosts unavailable", 8)
	if got := message(); got != "8 of 100 hosts unavailable" {
		t.Errorf("21 s later: %q, want the new figures", got)
	}
	now = now.Add(time.Second)
	r.waiting(m, WaitingForWindowReason, "the next window opens at %s", "11:00")
	if c := conditions.Get(m, infrav1.ReadyCondition); c.Reason != WaitingForWindowReason || c.Message != "the next window opens at 11:00" {
		t.Errorf("a new reason was not written at once: %+v", c)
	}
}
