package v1alpha1

import "testing"

// What each stage means for the host, in one place: kept from new claims (Holds), counted out of
// service by budgets (TakesHostOut), open to RedfishJobs though a Machine claims it
// (OpensHostToJobs; never for a BMC-only update, whose Machine keeps running).
func TestWhatEachStageMeansForTheHost(t *testing.T) {
	bmcOnly := []MaintenanceTask{{Firmware: &FirmwareUpdate{Component: FirmwareBMC}}}
	bios := []MaintenanceTask{{Firmware: &FirmwareUpdate{Component: FirmwareBIOS}}}
	for _, tc := range []struct {
		stage                    MaintenanceStage
		holds, out, jobs, jobsBM bool
	}{
		{StagePending, false, false, false, false},
		{StageAnnounced, false, false, false, false},
		{StageApproved, true, false, false, false},
		{StageDraining, true, true, false, false},
		{StageInMaintenance, true, true, true, false},
		{StageCompleted, false, false, false, false},
		{StageFailed, true, true, false, false},
		{StageCancelled, false, false, false, false},
	} {
		m := &RedfishMaintenance{Spec: RedfishMaintenanceSpec{Tasks: bios}, Status: RedfishMaintenanceStatus{Stage: tc.stage}}
		b := &RedfishMaintenance{Spec: RedfishMaintenanceSpec{Tasks: bmcOnly}, Status: RedfishMaintenanceStatus{Stage: tc.stage}}
		if got := [4]bool{tc.stage.Holds(), m.TakesHostOut(), m.OpensHostToJobs(), b.OpensHostToJobs()}; got != [4]bool{tc.holds, tc.out, tc.jobs, tc.jobsBM} {
			t.Errorf("%s: holds, out, jobs, jobs (BMC only) = %v, want %v", tc.stage, got, [4]bool{tc.holds, tc.out, tc.jobs, tc.jobsBM})
		}
	}
}
