// Package discovery finds the FPGA cards of a node and their devices in its
// sysfs/devfs tree. The model (Card, Port, Health) is the same for every
// card family; each registered Family (family.go: Intel cards under the
// Linux in-tree DFL driver or the out-of-tree OPAE driver, AMD/Xilinx Alveo
// cards under XRT, and any a program registers) finds and refreshes its own
// cards.
//
// Every path is read below a root directory, so the same code runs on a host
// (root "/") and on a simulated tree written by package simnode.
package discovery

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// KernelDriver names the kernel driver family that exposes a card.
type KernelDriver string

const (
	// DriverNone means no FPGA kernel driver is loaded.
	DriverNone KernelDriver = "none"
	// DriverDFL is the Linux in-tree Device Feature List driver (dfl-*).
	DriverDFL KernelDriver = "dfl"
	// DriverOPAE is the out-of-tree OPAE driver (intel-fpga-*).
	DriverOPAE KernelDriver = "opae"
	// DriverXRT is AMD/Xilinx's XRT driver pair (xocl on the user PF,
	// xclmgmt on the management PF) of Alveo cards.
	DriverXRT KernelDriver = "xrt"
)

// Selection says which families a Scanner reads: Only those (every family
// whose kernel driver is loaded when empty), except Exclude.
type Selection struct {
	Only, Exclude []KernelDriver
}

// ParseSelection parses a --kernel-driver value: "auto" (every family
// whose kernel driver is loaded), "none", a comma-separated list of
// families ("dfl,xrt"), or "auto" followed by exclusions ("auto,-xrt").
func ParseSelection(s string) (Selection, error) {
	var sel Selection
	if s == "" || s == "auto" {
		return sel, nil
	}
	auto := false
	for i, part := range strings.Split(s, ",") {
		name, exclude := strings.CutPrefix(strings.TrimSpace(part), "-")
		switch {
		case i == 0 && name == "auto" && !exclude:
			auto = true
			continue
		case name == string(DriverNone) && !exclude && s == name:
			return Selection{Only: []KernelDriver{DriverNone}}, nil
		case FamilyOf(KernelDriver(name)) == nil:
			return Selection{}, fmt.Errorf("kernel driver %q is not one of %s (or auto, none; \"auto,-xrt\" excludes one)", name, strings.Join(familyNames(), ", "))
		case exclude && !auto:
			return Selection{}, fmt.Errorf("kernel driver %q: an exclusion follows \"auto\", as in \"auto,-%s\"", part, name)
		case exclude:
			sel.Exclude = append(sel.Exclude, KernelDriver(name))
		case auto:
			return Selection{}, fmt.Errorf("kernel driver %q: after \"auto\" only exclusions (\"-%s\") may follow", part, name)
		default:
			sel.Only = append(sel.Only, KernelDriver(name))
		}
	}
	return sel, nil
}

// String renders a selection as ParseSelection reads it.
func (sel Selection) String() string {
	if len(sel.Only) == 0 {
		parts := []string{"auto"}
		for _, d := range sel.Exclude {
			parts = append(parts, "-"+string(d))
		}
		return strings.Join(parts, ",")
	}
	parts := make([]string, len(sel.Only))
	for i, d := range sel.Only {
		parts[i] = string(d)
	}
	return strings.Join(parts, ",")
}

// DevNode is a character device exposed by the kernel: its sysfs directory,
// its /dev path as a container sees it and its major:minor numbers.
type DevNode struct {
	// Name is the kernel name, e.g. "dfl-port.0" or "intel-fpga-fme.0".
	Name string
	// SysfsPath is the resolved sysfs directory of the device, below the root.
	SysfsPath string
	// Path is the device node path on the node, without the root prefix
	// ("/dev/dfl-port.0"): the path a container gets.
	Path string
	// HostPath is Path below the discovery root: the file to stat or open.
	HostPath string
	Major    uint32
	Minor    uint32
}

// Card is one FPGA card: for Intel cards the PCI physical function that
// carries the FPGA Management Engine (FME), with every port found on it and
// on its SR-IOV virtual functions; for an Alveo card its user PF (with its
// management PF found beside it).
type Card struct {
	Driver KernelDriver
	// PCIAddress is the card's function's address in extended BDF form
	// ("0000:81:00.0"): the Intel physical function, the Alveo user PF.
	PCIAddress string
	// PCIPath is the resolved sysfs directory of that function.
	PCIPath string
	// ManagementPath is the sysfs directory of the card's management
	// function where a family's cards have one apart (an Alveo card's
	// management PF), else "".
	ManagementPath string
	VendorID       string // "0x8086"
	DeviceID       string // "0x09c4"
	// Model is a readable card name where the family knows the card
	// ("Intel PAC D5005", "AMD Alveo U250"), else "".
	Model string
	// NUMANode is -1 when the platform reports no affinity.
	NUMANode int
	// SocketID is -1 when the FME has no readable socket_id (and on cards
	// without an FME).
	SocketID int
	// FME is the node that programs the card's region, where the family
	// has one (an Intel card's FPGA Management Engine; zero elsewhere). It
	// is a management node: see ManagementNodes.
	FME DevNode
	// Management are the card's other management nodes (an Alveo card's
	// /dev/xclmgmt<N>). No management node is ever given to a container.
	Management []DevNode
	// BitstreamID is the FME's bitstream_id as the kernel prints it.
	BitstreamID string
	PortsNum    int
	// InterfaceID is the canonical (32 lowercase hex) interface ID of the
	// card's programmable region: what a bitstream must be built for.
	// InterfaceIDs lists every one where the card has several (an Alveo
	// shell), InterfaceID first. Intel cards are discovered only with an
	// interface ID; an Alveo card without a usable one is unhealthy.
	InterfaceID  string
	InterfaceIDs []string
	// Attributes are the family's own device attributes of the card's
	// devices (see Attribute).
	Attributes []Attribute
	// Legacy names the card's devices as the device plugin of its vendor
	// did, for the legacy endpoint.
	Legacy Legacy
	Ports  []*Port

	// hwmon is the FME's hwmon directory ("" when it has none);
	// interfaceIDFile the attribute the interface ID was read from. Both are
	// found by Scan so that Refresh never walks directories.
	hwmon           string
	interfaceIDFile string
	// tempCrit is the hwmon critical temperature in millidegrees Celsius
	// (0 until read): a threshold of the card's hardware, read once.
	tempCrit int64
	// readAt is when the pass that read what the card shows began: zero
	// while the pass that reads it runs; a stalled copy keeps its own.
	readAt time.Time
}

// ReadAt is when the discovery pass that read what the card shows began:
// a change made before it shows in the card, one made after it may not.
// A card kept from an earlier pass while a read of it is stuck keeps that
// pass's time. Zero when unknown.
func (c *Card) ReadAt() time.Time { return c.readAt }

// MaxInterfaceIDs is how many interface IDs of a card are published as
// device attributes: interfaceID, then interfaceID2 up to interfaceID4. A
// shell that lists more (none known does) is still programmed with a
// bitstream built for any of them; only DeviceClasses cannot select the
// card by the ones beyond.
const MaxInterfaceIDs = 4

// Interfaces returns the interface IDs a bitstream may be built for to be
// loaded into the card's region, InterfaceID first (none when the card has
// no usable one). An Alveo shell may list several; a bitstream built for any
// of them loads.
func (c *Card) Interfaces() []string {
	var out []string
	for _, id := range append([]string{c.InterfaceID}, c.InterfaceIDs...) {
		if id != "" && id != AllF && id != AllZero && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Accepts reports whether a bitstream built for interface ID id (canonical)
// loads into the card's region: id is one of its Interfaces.
func (c *Card) Accepts(id string) bool {
	return slices.Contains(c.Interfaces(), id)
}

// ManagementNodes returns every node of the card a container must never
// get: the FME and the other management nodes.
func (c *Card) ManagementNodes() []DevNode {
	var out []DevNode
	if c.FME.Path != "" {
		out = append(out, c.FME)
	}
	return append(out, c.Management...)
}

// Name names the card as one device (the legacy endpoint's region mode,
// the admin API): the kernel name of its first management node (an Intel
// card's FME, "dfl-fme.0"), else its PCI address.
func (c *Card) Name() string {
	if m := c.ManagementNodes(); len(m) > 0 {
		return m[0].Name
	}
	return c.PCIAddress
}

// Attribute is a device attribute of one family beyond the ones every
// family has. Value is a string, an int64 or a bool.
type Attribute struct {
	// Name is a C identifier of at most 32 characters ("socketID").
	Name  string
	Value any
}

// Legacy is how the device plugin a card's vendor shipped advertised the
// card: the legacy endpoint keeps those names so that pod specs move over
// unchanged.
type Legacy struct {
	// Resource, when set, is the one resource every device of the card is
	// advertised under ("amd.com/<VBNV>-<timestamp>"), and DeviceID the
	// card's device ID in it (the user PF's BDF). When empty the card is
	// advertised under the Intel plugin's names: one af resource per
	// loaded function or one region resource per interface ID, in the
	// endpoint's domain.
	Resource string
	DeviceID string
}

// Port is one device of a card: the unit a container is given (an Intel
// accelerator port, whose region is programmed through the card's FME; an
// Alveo card's user function).
type Port struct {
	// Node is the device's main node; ExtraNodes are further nodes a
	// container using it gets (an Alveo card's /dev/xfpga user nodes).
	Node       DevNode
	ExtraNodes []DevNode
	// ID is the port id the kernel prints in the port's "id" file; it is the
	// port_id handed to the FME's PORT_PR ioctl (0 on an Alveo card).
	ID int
	// PCIAddress is the address of the function the port sits on: the card's
	// physical function, or a virtual function when VirtualFunction is set.
	PCIAddress string
	PCIPath    string
	// VirtualFunction is true for a port on an SR-IOV VF whose FME lives on
	// the physical function (found through the VF's physfn link).
	VirtualFunction bool
	// AFUID is the canonical ID of the accelerator function currently loaded
	// (the xclbin UUID on an Alveo card). Empty when none is loaded or it
	// could not be read (see Health).
	AFUID string
	// AFUIDFile is the sysfs attribute that holds AFUID: the port's afu_id
	// (Intel), the user PF's xclbinuuid (XRT). Empty means
	// Node.SysfsPath/afu_id.
	AFUIDFile string
	// Attributes are the family's own attributes of this device.
	Attributes []Attribute
	Health     Health
}

// Nodes returns every node a container using the device gets: Node, then
// ExtraNodes.
func (p *Port) Nodes() []DevNode { return append([]DevNode{p.Node}, p.ExtraNodes...) }

// Health is the outcome of the checks discovery can make on a device.
type Health struct {
	Healthy bool
	// Reasons says, in words, why a device is unhealthy; empty when healthy.
	Reasons []string
	// Causes names each reason's cause in a few words that are a valid
	// label value ([A-Za-z0-9._-], at most 63 characters, alphanumeric at
	// both ends), e.g. "read-of-afu_id-timed-out": what a device taint
	// says. Causes[i] belongs to Reasons[i].
	Causes []string
}

// String renders "healthy" or the joined reasons.
func (h Health) String() string {
	if h.Healthy {
		return "healthy"
	}
	return strings.Join(h.Reasons, "; ")
}

// Cause is the first cause ("" when healthy).
func (h Health) Cause() string {
	if len(h.Causes) == 0 {
		return ""
	}
	return h.Causes[0]
}

// Fail marks the device unhealthy for cause, described by format.
func (h *Health) Fail(cause, format string, args ...any) {
	h.Healthy = false
	h.Causes = append(h.Causes, cause)
	h.Reasons = append(h.Reasons, fmt.Sprintf(format, args...))
}

// add adds other's reasons to h.
func (h *Health) add(other Health) {
	if other.Healthy {
		return
	}
	h.Healthy = false
	h.Reasons = append(h.Reasons, other.Reasons...)
	h.Causes = append(h.Causes, other.Causes...)
}

// DeviceName is the stable DNS label under which the port is published:
// "fpga-" + the PCI address with ':' and '.' turned into '-' + "-p" + port id,
// e.g. "fpga-0000-81-00-0-p0".
func (p *Port) DeviceName() string {
	r := strings.NewReplacer(":", "-", ".", "-")
	return fmt.Sprintf("fpga-%s-p%d", strings.ToLower(r.Replace(p.PCIAddress)), p.ID)
}

// Result is one discovery pass.
type Result struct {
	// Drivers are the kernel drivers whose cards the pass read: every
	// family found loaded (or selected); empty when none is.
	Drivers []KernelDriver
	Cards   []*Card
	// Errors holds one error per card (or port) that could not be used, for
	// example a card without an interface ID. Those cards are not in Cards.
	Errors []error
	// Started is when the pass began. A card it kept from an earlier pass
	// (see Card.ReadAt) is only as recent as that pass.
	Started time.Time
}

// leftOutStuck reports whether r left a card out because a read of it
// was stuck (a card no earlier pass had read); false for a nil Result.
func (r *Result) leftOutStuck() bool {
	if r == nil {
		return false
	}
	return slices.ContainsFunc(r.Errors, func(err error) bool { return errors.Is(err, ErrReadTimedOut) })
}

// Ports returns every port of every card, in card order (none for a nil
// Result).
func (r *Result) Ports() []*Port {
	if r == nil {
		return nil
	}
	var ports []*Port
	for _, c := range r.Cards {
		ports = append(ports, c.Ports...)
	}
	return ports
}

// FindPort returns the card and port published under the given device name.
func (r *Result) FindPort(deviceName string) (*Card, *Port, bool) {
	for _, c := range r.Cards {
		for _, p := range c.Ports {
			if p.DeviceName() == deviceName {
				return c, p, true
			}
		}
	}
	return nil, nil, false
}
