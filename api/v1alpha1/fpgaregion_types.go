package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FpgaRegionKind is the kind of FpgaRegion.
const FpgaRegionKind = "FpgaRegion"

// FpgaRegion gives a partial-reconfiguration region type (an interface ID) a
// cluster-wide logical name. For an FpgaRegion named NAME the
// fpga-dra-controller keeps a DeviceClass NAME, owned by it, that selects the
// driver's programmable devices whose interfaceID attribute is
// spec.interfaceID. A claim for it names the function to load in its own
// FpgaConfig.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=fpgaregion,categories=fpga
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Interface ID",type=string,JSONPath=`.spec.interfaceID`
// +kubebuilder:printcolumn:name="Devices",type=integer,JSONPath=`.status.devices`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FpgaRegion struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FpgaRegionSpec `json:"spec"`

	// +optional
	Status FpgaRegionStatus `json:"status,omitempty"`
}

// FpgaRegionSpec names a region type.
type FpgaRegionSpec struct {
	// InterfaceID is the interface ID of the regions (the compat_id of the
	// region, the interface-uuid of a GBS file): 32 lowercase hex digits,
	// never all f.
	// +required
	// +kubebuilder:validation:MinLength=32
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{32}$')",message="must be 32 lowercase hex digits without dashes, such as 69528db6eb31577a8c3668f9faa081f6"
	// +kubebuilder:validation:XValidation:rule="self != 'ffffffffffffffffffffffffffffffff'",message="the all-f ID marks an unusable region: use the ID of a real one"
	InterfaceID string `json:"interfaceID"`

	// Description tells people what the region is (card, shell version).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// FpgaRegionStatus is what the fpga-dra-controller observed last.
type FpgaRegionStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready (the DeviceClass is in place and up to date) and
	// DevicesAvailable (the cluster publishes at least one matching device).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// DeviceClass names the DeviceClass the controller keeps for the region.
	// +optional
	DeviceClass string `json:"deviceClass,omitempty"`

	// Devices counts the devices published in ResourceSlices that the
	// DeviceClass selects, leaving out devices tainted NoSchedule or
	// NoExecute (unhealthy ones). Devices in use are counted.
	// +optional
	Devices int32 `json:"devices"`
}

// FpgaRegionList is a list of FpgaRegions.
//
// +kubebuilder:object:root=true
type FpgaRegionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FpgaRegion `json:"items"`
}
