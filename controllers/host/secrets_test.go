package host

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/caprf/cluster-api-provider-redfish/internal/apireads"
)

// A host's credentials are read from the API server once per version of their Secret, not on
// every reconcile; a changed password and a deleted Secret are seen at the next read.
func TestSecretReaderReadsASecretAgainOnlyWhenItsVersionChanged(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bmc"}, Data: map[string][]byte{"username": []byte("admin"), "password": []byte("one")}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sec).Build()
	api := &apireads.Counter{Reader: c}
	r := &secretReader{api: api, versions: c}
	key := client.ObjectKeyFromObject(sec)

	for i := range 3 {
		data, err := r.get(ctx, key)
		if err != nil || string(data["password"]) != "one" {
			t.Fatalf("read %d: %q, %v", i, data["password"], err)
		}
	}
	if api.Gets != 1 {
		t.Errorf("3 reads of an unchanged Secret reached the API server %d times, want 1", api.Gets)
	}

	sec.Data["password"] = []byte("two")
	if err := c.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if data, err := r.get(ctx, key); err != nil || string(data["password"]) != "two" {
		t.Fatalf("after the password changed: %q, %v", data["password"], err)
	}
	if api.Gets != 2 {
		t.Errorf("a changed Secret was read %d times in all, want 2", api.Gets)
	}

	if err := c.Delete(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if _, err := r.get(ctx, key); !apierrors.IsNotFound(err) {
		t.Errorf("a deleted Secret read as %v, want NotFound", err)
	}

	// Without a version watch every read reaches the API server.
	plain := &secretReader{api: api}
	before := api.Gets
	_, _ = plain.get(ctx, key)
	_, _ = plain.get(ctx, key)
	if api.Gets-before != 2 {
		t.Errorf("without versions: %d reads reached the API server, want 2", api.Gets-before)
	}
}
