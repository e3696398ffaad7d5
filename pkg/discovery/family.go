package discovery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Family is one kind of FPGA card with its kernel driver: how its cards
// are found below a root, how their changing attributes and health are
// re-read, and which device nodes are its management nodes. Everything
// above discovery (slices, state, CDI, endpoints) works on the Card and
// Port it fills and names no family; package program adds the family's
// bitstream formats and programmer (program.Family).
type Family interface {
	// Driver names the family; it is the kernelDriver attribute of its
	// devices and the name --kernel-driver selects it by.
	Driver() KernelDriver
	// Present reports whether the family's kernel driver shows below root.
	Present(root string) bool
	// Scan adds the family's cards below s.Root to res, and the cards and
	// ports it cannot use to res.Errors. Each Card's Driver is the
	// family's, its ports' Nodes the nodes a container gets, and its
	// ManagementNodes the ones a container must never get. It fails only
	// when the family's own directory cannot be read or ctx ended.
	Scan(ctx context.Context, s *Scanner, res *Result) error
	// Refresh re-reads one of its cards' changing attributes (IDs,
	// status, device nodes, health), noting its reads in tr, and reports
	// whether a published field changed. It returns a new Card and never
	// modifies c.
	Refresh(c *Card, tr *Tracker) (*Card, bool)
	// Models names the family's cards by "vendor:device" of the function
	// a Card stands for.
	Models() map[string]string
	// ManagementName reports whether a device node path, as a container
	// sees it ("/dev/dfl-fme.0"), is named as one of the family's
	// management nodes on any card: a last guard against a discovery bug
	// handing such a node to a container.
	ManagementName(path string) bool
}

// registry is the one list of card families, in detection order: the
// Intel ones, then those registered (package family/xrt registers XRT).
var registry = struct {
	mu   sync.RWMutex
	list []Family
}{list: []Family{dflLayout, opaeLayout}}

// Register adds f to the families every Scanner, selection and
// management-node check consults, after those already registered; a
// family registered under a driver name already taken replaces that
// family in place. It panics on a name that is empty, "auto" or "none",
// or not a DNS label, as those cannot be selected.
func Register(f Family) {
	d := string(f.Driver())
	if d == "" || d == "auto" || d == string(DriverNone) || !dnsLabel(d) {
		panic(fmt.Sprintf("discovery: family name %q: want a lowercase DNS label other than auto and none", d))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if i := slices.IndexFunc(registry.list, func(g Family) bool { return g.Driver() == f.Driver() }); i >= 0 {
		registry.list[i] = f
		return
	}
	registry.list = append(registry.list, f)
}

// Families returns the registered families, in detection order.
func Families() []Family {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	return slices.Clone(registry.list)
}

// FamilyOf returns the registered family of kernel driver d, or nil.
func FamilyOf(d KernelDriver) Family {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	for _, f := range registry.list {
		if f.Driver() == d {
			return f
		}
	}
	return nil
}

// ManagementFamily returns the first registered family that names the
// device node path as one of its management nodes (see
// Family.ManagementName), or "" when none does.
func ManagementFamily(path string) KernelDriver {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	for _, f := range registry.list {
		if f.ManagementName(path) {
			return f.Driver()
		}
	}
	return ""
}

// ParseKernelDriver accepts one family's name ("dfl", "opae", "xrt"), or
// "auto" or "" for none in particular ("").
func ParseKernelDriver(s string) (KernelDriver, error) {
	if s == "" || s == "auto" {
		return "", nil
	}
	if FamilyOf(KernelDriver(s)) == nil {
		return "", fmt.Errorf("kernel driver %q is not one of auto, %s", s, strings.Join(familyNames(), ", "))
	}
	return KernelDriver(s), nil
}

// ModelName returns the readable name of the card whose function has the
// PCI IDs vendorID:deviceID, as discovery publishes it: the name a family
// knows, else "vendor:device" ("" when either ID is unknown).
func ModelName(vendorID, deviceID string) string {
	for _, f := range Families() {
		if m := LookupModel(f.Models(), vendorID, deviceID); m != "" && m != strings.ToLower(vendorID+":"+deviceID) {
			return m
		}
	}
	return LookupModel(nil, vendorID, deviceID)
}

// familyNames lists the families' names.
func familyNames() []string {
	var names []string
	for _, f := range Families() {
		names = append(names, string(f.Driver()))
	}
	return names
}

// dnsLabel reports whether s is a lowercase DNS label (RFC 1123).
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' }) < 0
}
