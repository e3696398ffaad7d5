// Package discovery finds FPGA cards and their ports in a sysfs/devfs tree
// laid out by the Linux in-tree DFL driver or the out-of-tree OPAE driver.
//
// Every path is read below a root directory, so the same code runs on a host
// (root "/") and on a simulated tree written by package simnode.
package discovery

import (
	"fmt"
	"strings"
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

// ParseKernelDriver accepts "auto", "dfl", "opae", "xrt" or "none". "auto"
// yields "".
func ParseKernelDriver(s string) (KernelDriver, error) {
	switch s {
	case "", "auto":
		return "", nil
	case string(DriverDFL), string(DriverOPAE), string(DriverXRT), string(DriverNone):
		return KernelDriver(s), nil
	}
	return "", fmt.Errorf("kernel driver %q is not one of auto, dfl, opae, xrt, none", s)
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

// Card is one FPGA card: the PCI physical function that carries the FPGA
// Management Engine (FME), with every port found on it and on its SR-IOV
// virtual functions.
type Card struct {
	Driver KernelDriver
	// PCIAddress is the physical function's address in extended BDF form
	// ("0000:81:00.0").
	PCIAddress string
	// PCIPath is the resolved sysfs directory of the physical function.
	PCIPath  string
	VendorID string // "0x8086"
	DeviceID string // "0x09c4"
	// NUMANode is -1 when the platform reports no affinity.
	NUMANode int
	// SocketID is -1 when the FME has no readable socket_id.
	SocketID int
	FME      DevNode
	// BitstreamID is the FME's bitstream_id as the kernel prints it.
	BitstreamID string
	PortsNum    int
	// InterfaceID is the canonical (32 lowercase hex) interface ID of the
	// card's partial-reconfiguration region; never empty on a discovered card.
	InterfaceID string
	Ports       []*Port

	// hwmon is the FME's hwmon directory ("" when it has none);
	// interfaceIDFile the attribute the interface ID was read from. Both are
	// found by Scan so that Refresh never walks directories.
	hwmon           string
	interfaceIDFile string
	// tempCrit is the hwmon critical temperature in millidegrees Celsius
	// (0 until read): a threshold of the card's hardware, read once.
	tempCrit int64
}

// Port is one accelerator port: the unit a container is given. Its
// partial-reconfiguration region is programmed through the card's FME.
type Port struct {
	Node DevNode
	// ID is the port id the kernel prints in the port's "id" file; it is the
	// port_id handed to the FME's PORT_PR ioctl.
	ID int
	// PCIAddress is the address of the function the port sits on: the card's
	// physical function, or a virtual function when VirtualFunction is set.
	PCIAddress string
	PCIPath    string
	// VirtualFunction is true for a port on an SR-IOV VF whose FME lives on
	// the physical function (found through the VF's physfn link).
	VirtualFunction bool
	// AFUID is the canonical ID of the accelerator function currently loaded.
	// Empty when it could not be read (see Health).
	AFUID string
	// AFUIDFile is the sysfs attribute that holds AFUID: the port's afu_id
	// (Intel), the user PF's xclbinuuid (XRT). Empty means
	// Node.SysfsPath/afu_id.
	AFUIDFile string
	Health    Health
}

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

// fail marks the device unhealthy for cause, described by format.
func (h *Health) fail(cause, format string, args ...any) {
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
	Driver KernelDriver
	Cards  []*Card
	// Errors holds one error per card (or port) that could not be used, for
	// example a card without an interface ID. Those cards are not in Cards.
	Errors []error
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
