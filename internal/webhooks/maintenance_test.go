package webhooks

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// The work announced is the work approved: tasks are fixed past Pending; complete stays writable.
func TestMaintenanceTasksAreFixedOnceAnnounced(t *testing.T) {
	hold := expv1.MaintenanceTask{PowerOffAndHold: &expv1.PowerOffAndHold{}}
	image := expv1.MaintenanceTask{BootImage: &expv1.BootImage{URL: "https://images.example/diag.iso"}}
	for _, tc := range []struct {
		stage   expv1.MaintenanceStage
		change  func(*expv1.RedfishMaintenance)
		wantErr string
	}{
		{stage: expv1.StagePending, change: func(m *expv1.RedfishMaintenance) { m.Spec.Tasks = []expv1.MaintenanceTask{image} }},
		{stage: expv1.StageAnnounced, change: func(m *expv1.RedfishMaintenance) { m.Spec.Tasks = []expv1.MaintenanceTask{image} }, wantErr: "are fixed once the maintenance is announced (it is Announced)"},
		{stage: expv1.StageInMaintenance, change: func(m *expv1.RedfishMaintenance) { m.Spec.Tasks = nil }, wantErr: "are fixed"},
		{stage: expv1.StageInMaintenance, change: func(m *expv1.RedfishMaintenance) { m.Spec.Complete = true }},
	} {
		old := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Spec:   expv1.RedfishMaintenanceSpec{HostName: "h", Reason: "r", Requestor: "q", Tasks: []expv1.MaintenanceTask{hold}},
			Status: expv1.RedfishMaintenanceStatus{Stage: tc.stage}}
		m := old.DeepCopy()
		tc.change(m)
		_, err := (&Maintenance{}).ValidateUpdate(t.Context(), old, m)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.stage, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: want an error containing %q, got %v", tc.stage, tc.wantErr, err)
		}
	}
}
