package seed

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/caprf/cluster-api-provider-redfish/internal/install"
)

// diskWorld is a seed server for a claim of a raw image on a drive, whose API client may do what
// the manager's role allows on Secrets (get, patch; no update).
func diskWorld(t *testing.T) (*httptest.Server, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName("m1"), OwnerReferences: ownedByMachine("m1")}, Type: SecretType, Data: map[string][]byte{
		KeyToken: []byte(token), KeyBootstrapSecret: []byte("boot"), KeyProviderID: []byte("redfish://ns/h1/m1"),
		KeyHostname: []byte("m1"), KeyInstanceID: []byte("uid-1"), KeyImageURL: []byte("https://images.example/node.raw"),
		KeyImageFormat: []byte("raw"), KeyChecksum: []byte(strings.Repeat("ab", 32)), KeyRootSerial: []byte("S4-1"), KeyRootWWN: []byte("5002538e00000001"),
	}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sec).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "seed", errors.New("the manager's role grants patch, not update"))
		},
	}).Build()
	srv := &Server{Seeds: c, Reader: c, Writer: c, Hosts: c, CABundle: []byte("-----BEGIN CERTIFICATE-----\nseed-ca\n-----END CERTIFICATE-----\n")}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	srv.BaseURL = ts.URL
	return ts, c
}

func post(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body)) //nolint:noctx // test
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestTheDeployVolumeCarriesTheClaimsScriptAndTheReportIsRecordedOnce(t *testing.T) {
	ts, c := diskWorld(t)
	status, body := get(t, DeployVolumeURL(ts.URL, "ns", "m1", token))
	if status != 200 {
		t.Fatalf("deploy.iso: %d %s", status, body)
	}
	label, files, err := ReadVolume([]byte(body))
	if err != nil || label != CIDataLabel {
		t.Fatalf("deploy.iso: label %q, %v", label, err)
	}
	script := string(files["user-data"])
	for _, want := range []string{"#!/bin/bash", "image_url='https://images.example/node.raw'", "wwn='5002538e00000001'", "serial='S4-1'",
		"report_url='" + InstallReportURL(ts.URL, "ns", "m1", token) + "'", "seed-ca"} {
		if !strings.Contains(script, want) {
			t.Errorf("the script lacks %q", want)
		}
	}
	if !strings.Contains(string(files["meta-data"]), "instance-id: uid-1-deploy") {
		t.Errorf("meta-data %q: the deploy boot must be an instance of its own (cloud-init runs its script once)", files["meta-data"])
	}
	if st, _ := get(t, DeployVolumeURL(ts.URL, "ns", "m1", strings.Repeat("0", 64))); st != 404 {
		t.Errorf("deploy.iso with another token: %d, want 404", st)
	}

	if st := post(t, InstallReportURL(ts.URL, "ns", "m1", strings.Repeat("0", 64)), `{"ok":true}`); st != 404 {
		t.Errorf("a report with another token: %d, want 404", st)
	}
	if st := post(t, InstallReportURL(ts.URL, "ns", "m1", token), `not json`); st != 400 {
		t.Errorf("a report that is not JSON: %d, want 400", st)
	}
	long := strings.Repeat("x", 5000)
	if st := post(t, InstallReportURL(ts.URL, "ns", "m1", token), `{"ok":false,"reason":"InstallFailed","message":"curl https://u:pw@img/x `+long+`"}`); st != 200 {
		t.Fatalf("report: %d", st)
	}
	if st := post(t, InstallReportURL(ts.URL, "ns", "m1", token), `{"ok":true,"checksum":"`+strings.Repeat("ab", 32)+`"}`); st != 200 {
		t.Fatalf("second report: %d", st)
	}
	if st, _ := get(t, DeployVolumeURL(ts.URL, "ns", "m1", token)); st != 404 {
		t.Errorf("deploy.iso once a report is in: %d, want 404 (a rebooted deploy image must find no script)", st)
	}
	sec := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: SecretName("m1")}, sec); err != nil {
		t.Fatal(err)
	}
	rep, err := install.ParseReport(sec.Data[KeyInstallReport])
	if err != nil {
		t.Fatalf("recorded report: %v (%q)", err, sec.Data[KeyInstallReport])
	}
	switch {
	case rep.OK:
		t.Error("the second report replaced the first")
	case strings.Contains(rep.Message, "pw@"):
		t.Errorf("a password was recorded: %s", rep.Message)
	case len(rep.Message) > 1100:
		t.Errorf("a message of %d bytes was recorded: the host's status would refuse it", len(rep.Message))
	case rep.ReceivedAt == "":
		t.Error("no receivedAt recorded")
	}
}
