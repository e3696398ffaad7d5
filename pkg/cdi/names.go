package cdi

import (
	"fmt"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

const (
	// specExt is the extension of the spec files: JSON, which every CDI
	// version reads.
	specExt = ".json"
	// maxClaimUIDLength bounds a claim UID (a Kubernetes UID is 36 bytes).
	maxClaimUIDLength = 128
)

// specPrefix is the start of the file name of every claim spec written for
// this vendor and class, "<vendor>-<class>_".
func (w *Writer) specPrefix() string {
	return cdiapi.GenerateTransientSpecName(w.vendor, w.class, "")
}

// specFileName is the spec file name of a claim:
// "<vendor>-<class>_<claimUID>.json".
func (w *Writer) specFileName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(w.vendor, w.class, claimUID) + specExt
}

// cdiDeviceName is the CDI device name of a claim's device, unique per claim.
func cdiDeviceName(claimUID, deviceName string) string {
	return claimUID + "-" + deviceName
}

// deviceID is the fully qualified CDI device ID "<vendor>/<class>=<name>".
func (w *Writer) deviceID(claimUID, deviceName string) string {
	return parser.QualifiedName(w.vendor, w.class, cdiDeviceName(claimUID, deviceName))
}

// validateClaimUID accepts what can safely be part of a file name and a CDI
// device name: ASCII letters, digits and '-', starting and ending with a
// letter or digit, as in a Kubernetes UID.
func validateClaimUID(uid string) error {
	if uid == "" {
		return fmt.Errorf("claim UID is empty: pass the ResourceClaim's metadata.uid")
	}
	if len(uid) > maxClaimUIDLength {
		return fmt.Errorf("claim UID %q is %d bytes, more than %d: pass the ResourceClaim's metadata.uid",
			uid, len(uid), maxClaimUIDLength)
	}
	if strings.IndexFunc(uid, func(r rune) bool { return !isAlphaNumeric(r) && r != '-' }) >= 0 ||
		!isAlphaNumeric(rune(uid[0])) || !isAlphaNumeric(rune(uid[len(uid)-1])) {
		return fmt.Errorf("claim UID %q: want ASCII letters, digits and inner '-' only, as in the ResourceClaim's metadata.uid", uid)
	}
	return nil
}

func isAlphaNumeric(r rune) bool {
	return ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
}

// DeviceIDs returns the CDI device IDs WriteClaimSpec returns for the same
// arguments, without writing anything: "<vendor>/<class>=<claimUID>-<device>".
func (w *Writer) DeviceIDs(claimUID string, devices []Device) []string {
	ids := make([]string, len(devices))
	for i, d := range devices {
		ids[i] = w.deviceID(claimUID, d.name)
	}
	return ids
}
