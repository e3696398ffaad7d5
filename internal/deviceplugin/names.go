package deviceplugin

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Mode is how the endpoint carves a node's FPGAs into extended resources.
type Mode string

const (
	// ModeAF advertises one resource per (interface ID, AFU ID) pair with
	// one device per port: the accelerator functions already loaded.
	ModeAF Mode = "af"
	// ModeRegion advertises one resource per interface ID with one device
	// per card: regions a createRuntime hook programs for the container.
	ModeRegion Mode = "region"
)

// ParseMode accepts "af" and "region".
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeAF, ModeRegion:
		return Mode(s), nil
	}
	return "", fmt.Errorf("device-plugin mode %q is not one of %s, %s", s, ModeAF, ModeRegion)
}

// maxResourceNameLength is the longest name part of an extended resource
// (after "<domain>/"): a Kubernetes qualified name part.
const maxResourceNameLength = 63

// AFResourceName is the resource name of an accelerator function, byte
// for byte the Intel FPGA device plugin's, so that pod specs written for
// it keep working:
//
//	af-<interfaceID[:3]>.<afuID[:3]>.<base64url, no padding, of the 32 bytes of interfaceID+afuID hex-decoded>
//
// e.g. af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs. The IDs are
// canonicalised first (see discovery.CanonicalID).
func AFResourceName(interfaceID, afuID string) (string, error) {
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

// RegionResourceName is the resource name of a partial-reconfiguration
// region, "region-<interfaceID>", as the Intel FPGA device plugin names it.
func RegionResourceName(interfaceID string) (string, error) {
	ifID, err := discovery.CanonicalID(interfaceID)
	if err != nil {
		return "", fmt.Errorf("interface ID: %w", err)
	}
	return "region-" + ifID, nil
}
