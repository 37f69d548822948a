package webhooks

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	maintenancectrl "github.com/caprf/cluster-api-provider-redfish/exp/controllers/maintenance"
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

// Firmware and BIOS-settings tasks are refused at admission when they could never run: images
// that are not http(s) or carry credentials (printed redacted), a version twice in a plan, values
// that are not a string, an integer or a boolean.
func TestFirmwareAndBIOSTasksAreCheckedAtAdmission(t *testing.T) {
	plan := func(urls ...string) expv1.MaintenanceTask {
		f := &expv1.FirmwareUpdate{Component: expv1.FirmwareBIOS}
		for i, u := range urls {
			f.Plan = append(f.Plan, expv1.FirmwareVersion{Version: fmt.Sprintf("v%d", i), ImageURL: u})
		}
		return expv1.MaintenanceTask{Firmware: f}
	}
	attrs := func(raw string) expv1.MaintenanceTask {
		return expv1.MaintenanceTask{BIOSSettings: &expv1.BIOSSettings{Attributes: map[string]apiextensionsv1.JSON{"BootMode": {Raw: []byte(raw)}}}}
	}
	withSecret := func(t expv1.MaintenanceTask) expv1.MaintenanceTask {
		t.Firmware.ImageCredentialsSecretName = "image-server"
		return t
	}
	twice := plan("http://images/a.bin", "http://images/b.bin")
	twice.Firmware.Plan[1].Version = "v0"
	for _, tc := range []struct {
		name    string
		task    expv1.MaintenanceTask
		wantErr string
		secret  string
	}{
		{name: "a plan of two images", task: plan("http://images/a.bin", "https://images/b.bin")},
		{name: "an ftp image", task: plan("ftp://images/a.bin"), wantErr: "must be an http or https URL"},
		{name: "credentials in the URL", task: plan("https://ops:hunter2@images/a.bin"), wantErr: "must not carry credentials", secret: "hunter2"},
		{name: "a version twice", task: twice, wantErr: "Duplicate value"},
		{name: "credentials over http", task: withSecret(plan("http://images/a.bin")), wantErr: "must be https when imageCredentialsSecretName is set"},
		{name: "credentials over https", task: withSecret(plan("https://images/a.bin"))},
		{name: "a fraction", task: attrs(`1.5`), wantErr: "not a fraction"},
		{name: "a 65-bit integer", task: attrs(`36893488147419103232`), wantErr: "at most 64 bits"},
		{name: "an enum value", task: attrs(`"Uefi"`)},
		{name: "an integer", task: attrs(`3`)},
		{name: "an object", task: attrs(`{"a":1}`), wantErr: "a string, an integer or a boolean is needed"},
		{name: "two tasks in one", task: expv1.MaintenanceTask{Firmware: plan("http://images/a.bin").Firmware, BIOSSettings: attrs(`1`).BIOSSettings}, wantErr: "set exactly one task"},
	} {
		m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Spec: expv1.RedfishMaintenanceSpec{HostName: "h", Reason: "r", Requestor: "q", Tasks: []expv1.MaintenanceTask{tc.task}}}
		_, err := (&Maintenance{}).ValidateCreate(t.Context(), m)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: want an error containing %q, got %v", tc.name, tc.wantErr, err)
		case tc.secret != "" && err != nil && strings.Contains(err.Error(), tc.secret):
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		}
	}
}

// An upgrade that brings stricter rules for tasks does not lock maintenances admitted before:
// their other fields stay writable and a deleted one can drop its finalizer.
func TestUnchangedTasksAreNotCheckedAgain(t *testing.T) {
	old := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Spec: expv1.RedfishMaintenanceSpec{HostName: "h", Reason: "r", Requestor: "q", Tasks: []expv1.MaintenanceTask{{Firmware: &expv1.FirmwareUpdate{
			Component: expv1.FirmwareBIOS, ImageCredentialsSecretName: "s", Plan: []expv1.FirmwareVersion{{Version: "1", ImageURL: "http://images/1.bin"}}}}}},
		Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageInMaintenance}}
	m := old.DeepCopy()
	m.Spec.Abort = true
	if _, err := (&Maintenance{}).ValidateUpdate(t.Context(), old, m); err != nil {
		t.Errorf("abort refused for tasks admitted under older rules: %v", err)
	}
	m = old.DeepCopy()
	m.Status.Stage = expv1.StagePending
	m.Spec.Tasks[0].Firmware.Plan[0].Version = "2"
	if _, err := (&Maintenance{}).ValidateUpdate(t.Context(), old, m); err == nil || !strings.Contains(err.Error(), "must be https") {
		t.Errorf("changed tasks are checked: %v", err)
	}
}

// A maintenance's power hold is a reboot request named maintenance/<name>, at most 253
// characters: a longer name is refused at creation instead of never holding the host.
func TestAMaintenanceNameFitsItsRebootRequest(t *testing.T) {
	for n, ok := range map[int]bool{241: true, 242: false} {
		m := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("m", n)},
			Spec: expv1.RedfishMaintenanceSpec{HostName: "h", Reason: "r", Requestor: "q"}}
		_, err := (&Maintenance{}).ValidateCreate(t.Context(), m)
		if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "metadata.name: Too long")) {
			t.Errorf("name of %d characters: %v", n, err)
		}
	}
}

// maintenanceCounter counts the maintenances the webhook reads from the API server.
type maintenanceCounter struct {
	client.Client
	read int
}

func (c *maintenanceCounter) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	err := c.Client.List(ctx, l, opts...)
	if ms, ok := l.(*expv1.RedfishMaintenanceList); ok {
		c.read += len(ms.Items)
	}
	return err
}

// A new maintenance's mode is checked against the maintenances of its own host only: the webhook
// lists them with the API server's field selector (a selectable field of the CRD) instead of
// reading every maintenance of the namespace for each create (100 creates read 5050 before).
func TestAMaintenanceCreateReadsOnlyItsHostsMaintenances(t *testing.T) {
	s := scheme(t)
	if err := expv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	maintenance := func(name, host string, mode expv1.MaintenanceMode, stage expv1.MaintenanceStage) *expv1.RedfishMaintenance {
		return &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:   expv1.RedfishMaintenanceSpec{HostName: host, Reason: "r", Requestor: "q", Mode: mode, Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}},
			Status: expv1.RedfishMaintenanceStatus{Stage: stage}}
	}
	b := fake.NewClientBuilder().WithScheme(s).
		// As the API server offers it (+kubebuilder:selectablefield on spec.hostName).
		WithIndex(&expv1.RedfishMaintenance{}, maintenancectrl.HostField, func(o client.Object) []string {
			return []string{o.(*expv1.RedfishMaintenance).Spec.HostName}
		})
	for i := range 40 {
		b = b.WithObjects(maintenance(fmt.Sprintf("other-%d", i), fmt.Sprintf("host-%d", i), expv1.Replace, expv1.StageInMaintenance))
	}
	b = b.WithObjects(maintenance("reuse", "h", expv1.Reuse, expv1.StageDraining))
	apiServer := &maintenanceCounter{Client: b.Build()}
	v := &Maintenance{Reader: apiServer}

	_, err := v.ValidateCreate(t.Context(), maintenance("replace", "h", expv1.Replace, ""))
	if err == nil || !strings.Contains(err.Error(), "maintenance reuse of host h is under way in mode Reuse") {
		t.Errorf("a Replace maintenance of a host under a Reuse one: got %v, want it refused", err)
	}
	if apiServer.read != 1 {
		t.Errorf("the webhook read %d maintenances from the API server for one create, want only the host's 1", apiServer.read)
	}
	apiServer.read = 0
	if _, err := v.ValidateCreate(t.Context(), maintenance("next", "host-3", expv1.Replace, "")); err != nil {
		t.Errorf("a Replace maintenance of a host under a Replace one: %v", err)
	}
	if apiServer.read != 1 {
		t.Errorf("the webhook read %d maintenances from the API server for one create, want only the host's 1", apiServer.read)
	}
}

// refusesHostSelector is an API server that does not offer spec.hostName as a field selector
// (older than Kubernetes v1.31, the CustomResourceFieldSelectors feature off, or the CRD not yet
// updated).
type refusesHostSelector struct{ client.Client }

func (c refusesHostSelector) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
		return apierrors.NewBadRequest("field label not supported: " + maintenancectrl.HostField)
	}
	return c.Client.List(ctx, l, opts...)
}

// Where the API server refuses the field selector, the mode check reads the namespace's
// maintenances instead: maintenances are still created and a contradicting mode still refused.
func TestAMaintenanceIsCheckedWhereTheAPIServerRefusesTheHostSelector(t *testing.T) {
	s := scheme(t)
	if err := expv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	reuse := &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "reuse"},
		Spec:   expv1.RedfishMaintenanceSpec{HostName: "h", Reason: "r", Requestor: "q", Mode: expv1.Reuse, Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}},
		Status: expv1.RedfishMaintenanceStatus{Stage: expv1.StageDraining}}
	v := &Maintenance{Reader: refusesHostSelector{fake.NewClientBuilder().WithScheme(s).WithObjects(reuse).Build()}}
	replace := func(host string) *expv1.RedfishMaintenance {
		return &expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "replace-" + host},
			Spec: expv1.RedfishMaintenanceSpec{HostName: host, Reason: "r", Requestor: "q", Tasks: []expv1.MaintenanceTask{{PowerOffAndHold: &expv1.PowerOffAndHold{}}}}}
	}
	if _, err := v.ValidateCreate(t.Context(), replace("other")); err != nil {
		t.Errorf("a maintenance of a free host: %v, want it admitted", err)
	}
	if _, err := v.ValidateCreate(t.Context(), replace("h")); err == nil || !strings.Contains(err.Error(), "under way in mode Reuse") {
		t.Errorf("a Replace maintenance of a host under a Reuse one: %v, want it refused", err)
	}
}
