package cluster

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// At N = 1000 every host status write (power reads, states, claims) woke each RedfishCluster of
// the namespace, which listed every host: failure domains depend on the hosts' labels only.
func TestOnlyAHostsLabelsChangingRefreshesTheFailureDomains(t *testing.T) {
	host := func(labels map[string]string, state infrav1.HostState) *infrav1.RedfishHost {
		return &infrav1.RedfishHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "u07", Labels: labels},
			Status:     infrav1.RedfishHostStatus{State: state},
		}
	}
	rack1 := map[string]string{infrav1.FailureDomainLabel: "rack1"}
	for _, tc := range []struct {
		name     string
		old, new *infrav1.RedfishHost
		want     bool
	}{
		{"status only", host(rack1, infrav1.HostStateAvailable), host(rack1, infrav1.HostStateProvisioning), false},
		{"failure domain changed", host(rack1, infrav1.HostStateAvailable), host(map[string]string{infrav1.FailureDomainLabel: "rack2"}, infrav1.HostStateAvailable), true},
		{"label added", host(nil, infrav1.HostStateAvailable), host(rack1, infrav1.HostStateAvailable), true},
		{"other label changed (it may be the cluster's hostSelector)", host(map[string]string{"pool": "a"}, infrav1.HostStateAvailable), host(map[string]string{"pool": "b"}, infrav1.HostStateAvailable), true},
	} {
		if got := hostLabelsChanged(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: refresh = %v, want %v", tc.name, got, tc.want)
		}
	}
}
