package job

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/controllers/host"
)

// leasedHost is an Available host whose lease a maintenance (UID m-uid) holds.
func leasedHost() *infrav1.RedfishHost {
	h := availableHost("h")
	h.Status.Lease = &infrav1.HostLease{Holder: infrav1.ObjectRef{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "RedfishMaintenance", Namespace: "ns", Name: "m"},
		HolderUID: "m-uid", AcquiredAt: metav1.Now()}
	return h
}

// A job of another waits while a maintenance holds the host's lease (it flashes, stages or boots
// the host), whatever its place in line; the holder's own job runs before it.
func TestAJobWaitsForTheHostsLeaseAndTheHoldersJobGoesFirst(t *testing.T) {
	user := onJob("a-user", "h")
	user.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
	own := onJob("m-apply", "h") // created after it: the job in line is the user's
	own.CreationTimestamp = metav1.Now()
	own.OwnerReferences = []metav1.OwnerReference{{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "RedfishMaintenance", Name: "m", UID: "m-uid", Controller: new(true)}}
	r, c, b := world(t, leasedHost(), user, own)
	for range 3 {
		got := reconcileJob(t, r, c, "a-user")
		if got.Status.StartTime != nil || b.tried != 0 {
			t.Fatalf("the job of another started (%v, %d resets) while a maintenance holds the host's lease", got.Status.StartTime, b.tried)
		}
	}
	for range 3 {
		reconcileJob(t, r, c, "m-apply")
	}
	if got := reconcileJob(t, r, c, "m-apply"); got.Status.StartTime == nil || b.tried == 0 {
		t.Errorf("the lease holder's job waits (%+v, %d resets): it goes before the jobs in line, which wait for the lease", got.Status, b.tried)
	}
}

// Nothing reaches a paused host's BMC from a job: one not started waits, one under way stops
// where it stands.
func TestAJobSendsNothingToAPausedHost(t *testing.T) {
	h := availableHost("h")
	h.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	running := onJob("running", "h")
	at := metav1.NewMicroTime(time.Now())
	running.Status.StartTime = &at
	running.Status.Tasks = []infrav1.JobTaskStatus{{State: infrav1.JobTaskRunning, StartTime: &at}}
	r, c, b := world(t, h, onJob("waiting", "h"), running)
	connects := 0
	connect := r.Connect
	r.Connect = func(ctx context.Context, h *infrav1.RedfishHost) (host.BMC, error) {
		connects++
		return connect(ctx, h)
	}
	for range 3 {
		reconcileJob(t, r, c, "waiting")
		reconcileJob(t, r, c, "running")
	}
	if connects != 0 || b.tried != 0 {
		t.Errorf("%d BMC connections, %d resets for jobs of a paused host: want none", connects, b.tried)
	}
}
