package testenv

import (
	"context"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// stoppedCache is the cache of a manager that stopped on its own: a list of a kind it never
// watched waits for an informer that never syncs.
type stoppedCache struct{ client.Client }

func (stoppedCache) List(ctx context.Context, _ client.ObjectList, _ ...client.ListOption) error {
	<-ctx.Done()
	return ctx.Err()
}

// CI once hung for good in Start: the manager stopped right after its cache synced, and the CRD
// list went through that cache. The CRDs are read from the API server.
func TestTheCRDsAreLabelledWithoutTheManagersCache(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ours := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "redfishhosts.infrastructure.cluster.x-k8s.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "infrastructure.cluster.x-k8s.io"}}
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ours).Build()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := labelForClusterctl(ctx, api, stoppedCache{Client: api}); err != nil {
		t.Fatalf("labelling through a stopped manager's cache: %v", err)
	}
	got := &apiextensionsv1.CustomResourceDefinition{}
	if err := api.Get(ctx, client.ObjectKeyFromObject(ours), got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Labels[clusterctlv1.ClusterctlLabel]; !ok {
		t.Errorf("labels %v, want %s", got.Labels, clusterctlv1.ClusterctlLabel)
	}
}
