// Package extresource names FPGA accelerator functions and regions as
// Kubernetes extended resources, byte for byte as the Intel FPGA device
// plugin named them, so that pod specs written for it keep working: the
// device-plugin endpoint advertises these names, and the controller gives
// them to DeviceClasses (extendedResourceName) so the same pod specs are
// served by DRA.
package extresource

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// AFName is the resource name of an accelerator function, byte
// for byte the Intel FPGA device plugin's, so that pod specs written for
// it keep working:
//
//	af-<interfaceID[:3]>.<afuID[:3]>.<base64url, no padding, of the 32 bytes of interfaceID+afuID hex-decoded>
//
// e.g. af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs. The IDs are
// canonicalised first (see discovery.CanonicalID).
func AFName(interfaceID, afuID string) (string, error) {
	ifID, err := discovery.CanonicalID(interfaceID)
	if err != nil {
		return "", fmt.Errorf("interface ID: %w", err)
	}
	afu, err := discovery.CanonicalID(afuID)
	if err != nil {
		return "", fmt.Errorf("AFU ID: %w", err)
	}
	raw, err := hex.DecodeString(ifID + afu)
	if err != nil { // unreachable: both are canonical hex
		return "", err
	}
	return "af-" + ifID[:3] + "." + afu[:3] + "." + base64.RawURLEncoding.EncodeToString(raw), nil
}

// RegionName is the resource name of a partial-reconfiguration
// region, "region-<interfaceID>", as the Intel FPGA device plugin names it.
func RegionName(interfaceID string) (string, error) {
	ifID, err := discovery.CanonicalID(interfaceID)
	if err != nil {
		return "", fmt.Errorf("interface ID: %w", err)
	}
	return "region-" + ifID, nil
}
