package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AcceleratorFunctionKind is the kind of AcceleratorFunction.
const AcceleratorFunctionKind = "AcceleratorFunction"

// AcceleratorFunctionMode says how workloads get an accelerator function.
type AcceleratorFunctionMode string

const (
	// ModeAF hands out only ports where the function is already loaded;
	// nothing is ever programmed. It is the default.
	ModeAF AcceleratorFunctionMode = "af"
	// ModeRegion also hands out compatible regions (same interface ID, on
	// nodes that allow programming) and loads the function into them.
	ModeRegion AcceleratorFunctionMode = "region"
)

// SupportedModes lists every valid AcceleratorFunctionMode.
var SupportedModes = []AcceleratorFunctionMode{ModeAF, ModeRegion}

// ProgramClassSuffix is appended to an AcceleratorFunction's name to name
// the DeviceClass that programs compatible regions.
const ProgramClassSuffix = "-program"

// MaxAcceleratorFunctionNameLength is the longest AcceleratorFunction name:
// the name plus ProgramClassSuffix must still be a DeviceClass name (a DNS
// subdomain of at most 253 characters).
const MaxAcceleratorFunctionNameLength = 253 - len(ProgramClassSuffix)

// MaxDescriptionLength is the longest description of an AcceleratorFunction
// or FpgaRegion, in characters (as the CRD's maxLength counts).
const MaxDescriptionLength = 1024

// AcceleratorFunction gives an accelerator function (AFU) a cluster-wide
// logical name. For an AcceleratorFunction named NAME the fpga-dra-controller
// keeps these DeviceClasses, owned by it:
//
//   - NAME selects the driver's devices whose afuID attribute is spec.afuID
//     (and whose interfaceID is spec.interfaceID, when set) and hands them out
//     with an FpgaConfig that never programs (programming: Never).
//   - NAME-program, in region mode only, selects the driver's programmable
//     devices whose interfaceID is spec.interfaceID and carries an FpgaConfig
//     that loads spec.afuID (from spec.bitstream, pinned by spec.sha256, when
//     set, or pulled from the OCI artifact spec.bitstreamRef) unless it is
//     already loaded.
//
// A claim that lists NAME before NAME-program in firstAvailable gets a port
// where the function is already loaded when one is free, and a region to
// program only when none is.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=af,categories=fpga
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="AFU ID",type=string,JSONPath=`.spec.afuID`
// +kubebuilder:printcolumn:name="Interface ID",type=string,JSONPath=`.spec.interfaceID`,priority=1
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Loaded",type=integer,JSONPath=`.status.loadedDevices`
// +kubebuilder:printcolumn:name="Programmable",type=integer,JSONPath=`.status.programmableDevices`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 245",message="name must be at most 245 characters: the DeviceClass NAME-program must fit in 253"
type AcceleratorFunction struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec AcceleratorFunctionSpec `json:"spec"`

	// +optional
	Status AcceleratorFunctionStatus `json:"status,omitempty"`
}

// AcceleratorFunctionSpec names an accelerator function and says where and
// how it may be used. Rules, checked by the CRD schema and again by the
// admission webhook (ValidateAcceleratorFunction):
//   - afuID and interfaceID are 32 lowercase hex digits, never all f.
//   - region mode requires interfaceID: only compatible regions are
//     programmed.
//   - bitstream, bitstreamRef and sha256 are for region mode only: af mode
//     loads nothing.
//   - bitstream and bitstreamRef exclude each other; bitstreamRef is pinned
//     by digest.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'region' || has(self.interfaceID)",message="interfaceID is required in region mode: only regions with this interface ID can load the function"
// +kubebuilder:validation:XValidation:rule="self.mode == 'region' || (!has(self.bitstream) && !has(self.bitstreamRef) && !has(self.sha256))",message="bitstream, bitstreamRef and sha256 are allowed in region mode only: af mode never programs"
// +kubebuilder:validation:XValidation:rule="!has(self.bitstream) || !has(self.bitstreamRef)",message="bitstream and bitstreamRef exclude each other: keep bitstream for a file in each node's repository or bitstreamRef for an OCI artifact, not both"
type AcceleratorFunctionSpec struct {
	// AFUID is the accelerator function's ID, as the port's afu_id reports
	// it once loaded (the accelerator-type-uuid of a GBS file): 32
	// lowercase hex digits.
	// +required
	// +kubebuilder:validation:MinLength=32
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{32}$')",message="must be 32 lowercase hex digits without dashes, such as d8424dc4a4a3c413f89e433683f9040b"
	// +kubebuilder:validation:XValidation:rule="self != 'ffffffffffffffffffffffffffffffff'",message="the all-f ID marks an unusable function: use the ID of a real one"
	AFUID string `json:"afuID"`

	// InterfaceID is the interface ID of the partial-reconfiguration
	// regions the function fits (the compat_id of the region, the
	// interface-uuid of a GBS file). Optional in af mode, where it narrows
	// the selection; required in region mode.
	// +optional
	// +kubebuilder:validation:MinLength=32
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{32}$')",message="must be 32 lowercase hex digits without dashes, such as 69528db6eb31577a8c3668f9faa081f6"
	// +kubebuilder:validation:XValidation:rule="self != 'ffffffffffffffffffffffffffffffff'",message="the all-f ID marks an unusable region: use the ID of a real one"
	InterfaceID string `json:"interfaceID,omitempty"`

	// Mode is af (use only ports where the function is already loaded) or
	// region (also program compatible regions). Defaults to af.
	// +optional
	// +kubebuilder:default=af
	// +kubebuilder:validation:Enum=af;region
	Mode AcceleratorFunctionMode `json:"mode,omitempty"`

	// Bitstream is the file to load, relative to each node's bitstream
	// repository. Empty: the node looks it up from interfaceID and afuID.
	// Region mode only.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="must be relative to the node's bitstream repository"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.]?(/|$)') && !self.contains('//') && !self.endsWith('/')",message="must be a clean path to a file inside the bitstream repository: no '.' or '..' elements, no empty elements"
	Bitstream string `json:"bitstream,omitempty"`

	// BitstreamRef names the bitstream as an OCI artifact pinned by the
	// digest of its manifest: REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST
	// (fpga-dra-driver bitstream push prints it). A tag alone is refused: it
	// can be moved to other content. Region mode only; excludes bitstream.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.contains('@')",message="must be pinned by digest, since a tag can be moved to other content: write REGISTRY/REPOSITORY[:TAG]@sha256:<manifest digest>, as printed by fpga-dra-driver bitstream push or shown by fpga-dra-driver bitstream inspect"
	// +kubebuilder:validation:XValidation:rule="!self.contains('@') || self.matches('^(localhost(:[0-9]+)?|[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)+(:[0-9]+)?|[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?:[0-9]+|[[][0-9a-fA-F:]+[]](:[0-9]+)?)/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}$')",message="must be REGISTRY/REPOSITORY[:TAG]@sha256:<64 lowercase hex digits>, the registry a host with a dot or a port (or localhost), the repository lowercase"
	BitstreamRef string `json:"bitstreamRef,omitempty"`

	// SHA256 pins the content of the bitstream file: 64 lowercase hex
	// digits, as sha256sum prints them. Region mode only.
	// +optional
	// +kubebuilder:validation:MinLength=64
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{64}$')",message="must be 64 lowercase hex digits, as printed by sha256sum"
	SHA256 string `json:"sha256,omitempty"`

	// Description tells people what the function does.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// AcceleratorFunctionStatus is what the fpga-dra-controller observed last.
type AcceleratorFunctionStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready (the DeviceClasses are in place and up to date) and
	// DevicesAvailable (the cluster publishes at least one matching device).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// DeviceClasses names the DeviceClasses the controller keeps for this
	// function, in firstAvailable order.
	// +optional
	// +listType=atomic
	DeviceClasses []string `json:"deviceClasses,omitempty"`

	// LoadedDevices counts the devices published in ResourceSlices where the
	// function is loaded now (the devices the NAME class selects), leaving
	// out devices tainted NoSchedule or NoExecute (unhealthy ones). Devices
	// in use are counted.
	// +optional
	LoadedDevices int32 `json:"loadedDevices"`

	// ProgrammableDevices counts the untainted devices the NAME-program
	// class selects: compatible regions on nodes that allow programming,
	// whatever they hold now. Always 0 in af mode.
	// +optional
	ProgrammableDevices int32 `json:"programmableDevices"`
}

// AcceleratorFunctionList is a list of AcceleratorFunctions.
//
// +kubebuilder:object:root=true
type AcceleratorFunctionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AcceleratorFunction `json:"items"`
}
