package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DriverName is the DRA driver name the binaries use unless their
// --driver-name says otherwise: the driver of the published devices and
// the domain of their attributes, the CDI vendor and the default domain
// of the device-plugin resource names.
const DriverName = "fpga.dra.dev"

// GroupName is the API group of every type in this package: the driver's
// name.
const GroupName = DriverName

// SchemeGroupVersion is the group and version of every type in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder collects the functions that register this package's
	// types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers this package's types with a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kind takes an unqualified kind and returns it qualified by this group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource takes an unqualified resource and returns it qualified by this
// group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

// addKnownTypes registers the kinds of this version: FpgaConfig (opaque
// device configuration, never stored) and the custom resources.
func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&FpgaConfig{},
		&AcceleratorFunction{},
		&AcceleratorFunctionList{},
		&FpgaRegion{},
		&FpgaRegionList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

// The custom resources of this version, as the API server serves them.
var (
	// AcceleratorFunctionsResource is the resource of AcceleratorFunction.
	AcceleratorFunctionsResource = SchemeGroupVersion.WithResource("acceleratorfunctions")
	// FpgaRegionsResource is the resource of FpgaRegion.
	FpgaRegionsResource = SchemeGroupVersion.WithResource("fpgaregions")
)
