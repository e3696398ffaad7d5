package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FpgaConfigKind is the kind of FpgaConfig.
const FpgaConfigKind = "FpgaConfig"

// ProgrammingPolicy says when the driver programs (partially reconfigures)
// the region behind an allocated port.
type ProgrammingPolicy string

const (
	// ProgrammingIfNeeded programs the region unless the requested
	// accelerator function is already loaded. It is the default.
	ProgrammingIfNeeded ProgrammingPolicy = "IfNeeded"
	// ProgrammingAlways programs the region on every prepare, even when the
	// requested accelerator function is already loaded (a fresh reset state).
	ProgrammingAlways ProgrammingPolicy = "Always"
	// ProgrammingNever never programs: prepare fails unless the requested
	// accelerator function is already loaded. DeviceClasses that hand out
	// pre-programmed functions ("af" mode) use it.
	ProgrammingNever ProgrammingPolicy = "Never"
)

// SupportedProgrammingPolicies lists every valid ProgrammingPolicy.
var SupportedProgrammingPolicies = []ProgrammingPolicy{
	ProgrammingIfNeeded,
	ProgrammingAlways,
	ProgrammingNever,
}

// FpgaConfig is the opaque device configuration of the fpga.dra.dev driver.
// It names the accelerator function (AFU) a container needs behind each port
// it is given and says how the driver may get it there.
//
// Rules, checked by Validate after Default:
//   - afuID is required in every programming mode: it is what the driver
//     loads (IfNeeded, Always) or asserts is loaded (Never). A config without
//     an accelerator function has nothing to do; select a region by its
//     interface ID with a CEL selector on the device's attributes instead.
//   - afuID and interfaceID are 32 lowercase hex digits. Default accepts
//     uppercase, a "0x" prefix, surrounding blanks and UUID dashes, and
//     canonicalises them; the all-f ID marks an unusable function or region
//     and is rejected.
//   - bitstream, when set, is a clean relative path of at most 255 bytes
//     inside the node's bitstream repository: not absolute, no ".." element,
//     valid UTF-8 without control characters (NUL included). The node still
//     confines it to the repository; these checks reject obviously bad values
//     early.
//   - bitstreamRef, when set, is an OCI reference pinned by digest,
//     REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST (see ParseBitstreamRef): a tag
//     alone is refused, since it can be moved to other content. bitstream
//     and bitstreamRef exclude each other.
//   - sha256, when set, is 64 lowercase hex digits (Default lowercases it).
//     It pins the content of the bitstream file the node loads, whether named
//     by bitstream or bitstreamRef or found in the repository from
//     interfaceID and afuID.
//   - programming is IfNeeded (the default), Always or Never. Never loads
//     nothing, so bitstream, bitstreamRef and sha256 must be empty with it.
//
// +kubebuilder:object:root=true
type FpgaConfig struct {
	metav1.TypeMeta `json:",inline"`

	// AFUID is the accelerator function to load or assert behind the port.
	// +required
	AFUID string `json:"afuID"`

	// InterfaceID, when set, asserts the interface ID of the port's
	// partial-reconfiguration region: prepare fails on any other region.
	// +optional
	InterfaceID string `json:"interfaceID,omitempty"`

	// Bitstream is the file to load, relative to the node's bitstream
	// repository. Empty: the node looks the file up from interfaceID and
	// afuID.
	// +optional
	Bitstream string `json:"bitstream,omitempty"`

	// BitstreamRef names the bitstream as an OCI artifact in a registry,
	// pinned by the digest of its manifest:
	// REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST. The node pulls it (with its
	// own registry credentials), verifies it and keeps it in a
	// content-addressed cache. Excludes bitstream.
	// +optional
	BitstreamRef string `json:"bitstreamRef,omitempty"`

	// SHA256 is the expected SHA-256 digest of the bitstream file.
	// +optional
	SHA256 string `json:"sha256,omitempty"`

	// Programming says when the region is programmed. Defaults to IfNeeded.
	// +optional
	Programming ProgrammingPolicy `json:"programming,omitempty"`
}
