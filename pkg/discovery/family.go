package discovery

import (
	"context"
	"fmt"
	"strings"
)

// family is one kind of FPGA card with its kernel driver: how its cards
// are found below a root and how their changing attributes are re-read.
// Everything above discovery (slices, state, CDI, endpoints) works on the
// Card and Port it fills and names no family.
type family interface {
	// driver names the family; it is the kernelDriver attribute of its
	// devices.
	driver() KernelDriver
	// present reports whether the family's kernel driver shows below root.
	present(root string) bool
	// scan adds the family's cards below the scanner's root to res, and
	// the cards and ports it cannot use to res.Errors; each card's reads
	// are bounded by the scanner's read timeout. It fails only when the
	// family's own directory cannot be read or ctx ended.
	scan(ctx context.Context, s *Scanner, res *Result) error
	// refresh re-reads one of its cards' changing attributes (IDs,
	// status, device nodes), noting its reads in tr, and reports whether
	// a published field changed.
	refresh(c *Card, tr *tracker) (*Card, bool)
	// models names the family's cards by "vendor:device" of the function
	// a Card stands for.
	models() map[string]string
}

// families lists every card family, in detection order. A new family is
// one more file set implementing family and one line here.
var families = []family{
	dflLayout,
	opaeLayout,
	xrtFamily{},
}

// familyOf returns the family of kernel driver d, or nil.
func familyOf(d KernelDriver) family {
	for _, f := range families {
		if f.driver() == d {
			return f
		}
	}
	return nil
}

// ParseKernelDriver accepts one family's name ("dfl", "opae", "xrt"), or
// "auto" or "" for none in particular ("").
func ParseKernelDriver(s string) (KernelDriver, error) {
	if s == "" || s == "auto" {
		return "", nil
	}
	if familyOf(KernelDriver(s)) == nil {
		return "", fmt.Errorf("kernel driver %q is not one of auto, %s", s, strings.Join(familyNames(), ", "))
	}
	return KernelDriver(s), nil
}

// ModelName returns the readable name of the card whose function has the
// PCI IDs vendorID:deviceID, as discovery publishes it: the name a family
// knows, else "vendor:device" ("" when either ID is unknown).
func ModelName(vendorID, deviceID string) string {
	for _, f := range families {
		if m := modelName(f.models(), vendorID, deviceID); m != "" && m != strings.ToLower(vendorID+":"+deviceID) {
			return m
		}
	}
	return modelName(nil, vendorID, deviceID)
}

// familyNames lists the families' names.
func familyNames() []string {
	names := make([]string, len(families))
	for i, f := range families {
		names[i] = string(f.driver())
	}
	return names
}
