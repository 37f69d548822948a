// Package v1alpha1 is the experimental maintenance API of CAPRF (RedfishMaintenance,
// RedfishMaintenancePolicy), in the shared group infrastructure.cluster.x-k8s.io. Its controllers
// run only with the manager's Maintenance feature gate on (--feature-gates=Maintenance=true).
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1"}

	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &RedfishMaintenance{}, &RedfishMaintenanceList{},
		&RedfishMaintenancePolicy{}, &RedfishMaintenancePolicyList{}, &RedfishMaintenanceSet{}, &RedfishMaintenanceSetList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
