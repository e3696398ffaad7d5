// Package simnode writes simulated FPGA nodes: sysfs and devfs trees laid out
// exactly as the Linux DFL driver and the out-of-tree OPAE driver lay out
// Intel cards (class links, /sys/dev/char links, /sys/bus/pci/devices
// links, PCI attributes, FME and port attributes, PR-region directories)
// and as XRT lays out AMD/Xilinx Alveo cards (alveo.go), with real
// character device nodes where the process may create them, and the
// /dev/char/MAJOR:MINOR links udev adds beside them.
//
// Tests, benchmarks and the demo use it; discovery reads what it writes with
// the same code it uses on a host.
package simnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Character device majors used by the simulated node. They are in the
// kernel's dynamic range, as the real drivers' majors are.
const (
	MajorDFLFME   = 510
	MajorDFLPort  = 511
	MajorOPAEFME  = 508
	MajorOPAEPort = 509
)

// Default IDs: the interface ID and AFU IDs of the Intel FPGA device plugin's
// own test fixture, so the legacy resource names can be checked against it.
const (
	DefaultInterfaceID = "69528db6eb31577a8c3668f9faa081f6"
	// DefaultAFUID is the AFU loaded on every even port by default.
	DefaultAFUID = "d8424dc4a4a3c413f89e433683f9040b"
	// SecondAFUID is the AFU loaded on every odd port by default.
	SecondAFUID = "f7df405cbd7acf7222f144b0b93acd18"
	// SampleAFUID is loaded nowhere; the simulate command's sample
	// repository has a bitstream for it, so a claim can program it.
	SampleAFUID = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
)

// maxCards is how many cards fit the simulated PCI topology: 4 root
// complexes with 31 root ports each.
const maxCards = 124

// Options describes the node to write.
type Options struct {
	// Driver is the Intel cards' driver, dfl or opae; "" writes no Intel
	// driver (Cards must then be 0).
	Driver       discovery.KernelDriver
	Cards        int
	PortsPerCard int
	// VF puts every port on its own SR-IOV virtual function; the FME stays
	// on the physical function.
	VF bool
	// InterfaceID of every card's PR region; DefaultInterfaceID when empty.
	InterfaceID string
	// AFUIDs are assigned to ports round robin; {DefaultAFUID, SecondAFUID}
	// when empty.
	AFUIDs []string
	// DashedIDs prints IDs as dashed UUIDs, as a proposed kernel patch does.
	DashedIDs bool
	// RegularFiles writes /dev entries as regular files instead of character
	// devices (for processes without CAP_MKNOD). Write falls back to it on
	// EPERM and says so in Node.RegularFiles.
	RegularFiles bool
	// Alveo adds one Alveo card per entry, of that model (AlveoModels:
	// "u250", "u55c").
	Alveo []string
	// AlveoXclbinUUID is loaded on every Alveo card ("" loads none).
	AlveoXclbinUUID string
}

// Node is a written simulated node.
type Node struct {
	Root string
	Opts Options
	// RegularFiles is true when /dev entries are regular files, not
	// character devices (the process could not mknod).
	RegularFiles bool
	Cards        []*Card
	Alveo        []*AlveoCard

	nextFME, nextPort, nextRegion int
}

// Card is one simulated card: where its pieces live in the tree.
type Card struct {
	Index       int
	PCIAddress  string
	PCIPath     string // absolute, below Root
	FMEName     string
	FMEPath     string // absolute sysfs dir of the FME
	InterfaceID string
	Ports       []*Port
}

// Port is one simulated port.
type Port struct {
	Name       string // dfl-port.N or intel-fpga-port.N
	ID         int
	PCIAddress string
	SysfsPath  string // absolute
	DevPath    string // absolute /dev node below Root
	Minor      int
}

// Write creates a simulated node below dir (which may exist) and returns it.
func Write(dir string, opts Options) (*Node, error) {
	if opts.Driver != discovery.DriverDFL && opts.Driver != discovery.DriverOPAE && (opts.Driver != "" || opts.Cards > 0) {
		return nil, fmt.Errorf("simulated driver %q is not dfl or opae", opts.Driver)
	}
	if opts.Cards < 0 || opts.Cards > maxCards {
		return nil, fmt.Errorf("cards %d is outside 0..%d", opts.Cards, maxCards)
	}
	if opts.PortsPerCard == 0 && opts.Cards == 0 {
		opts.PortsPerCard = 1
	}
	if opts.PortsPerCard < 1 || opts.PortsPerCard > 7 {
		return nil, fmt.Errorf("ports per card %d is outside 1..7", opts.PortsPerCard)
	}
	if opts.InterfaceID == "" {
		opts.InterfaceID = DefaultInterfaceID
	}
	if len(opts.AFUIDs) == 0 {
		opts.AFUIDs = []string{DefaultAFUID, SecondAFUID}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	n := &Node{Root: abs, Opts: opts, RegularFiles: opts.RegularFiles}
	for _, d := range []string{"dev", "sys/dev/char", "sys/bus/pci/devices", "proc/sys/kernel/random"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, err
		}
	}
	if opts.Driver != "" {
		classDir := "sys/class/fpga_region"
		if opts.Driver == discovery.DriverOPAE {
			classDir = "sys/class/fpga"
		}
		if err := os.MkdirAll(filepath.Join(abs, classDir), 0o755); err != nil {
			return nil, err
		}
	}
	if err := n.SetBootID("00000000-0000-4000-8000-000000000001"); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Cards; i++ {
		if _, err := n.AddCard(); err != nil {
			return nil, err
		}
	}
	for _, model := range opts.Alveo {
		if _, err := n.AddAlveo(model); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// SetBootID writes proc/sys/kernel/random/boot_id, as a reboot changes it.
func (n *Node) SetBootID(id string) error {
	return writeFile(filepath.Join(n.Root, "proc/sys/kernel/random/boot_id"), id+"\n")
}

// AddCard adds one card with Opts.PortsPerCard ports (hot-plug) and returns it.
func (n *Node) AddCard() (*Card, error) {
	i := len(n.Cards)
	if i >= maxCards {
		return nil, fmt.Errorf("the simulated PCI topology holds at most %d cards", maxCards)
	}
	rootBus := (i / 31) * 0x40
	bus := rootBus + 1 + i%31
	c := &Card{
		Index:       i,
		PCIAddress:  fmt.Sprintf("0000:%02x:00.0", bus),
		InterfaceID: n.Opts.InterfaceID,
	}
	rootDir := filepath.Join(n.Root, "sys/devices", fmt.Sprintf("pci0000:%02x", rootBus))
	bridge := filepath.Join(rootDir, fmt.Sprintf("0000:%02x:%02x.0", rootBus, 1+i%31))
	c.PCIPath = filepath.Join(bridge, c.PCIAddress)
	if err := n.writePCIFunction(c.PCIPath, c.PCIAddress, "0x09c4", i); err != nil {
		return nil, err
	}
	var err error
	if n.Opts.Driver == discovery.DriverDFL {
		err = n.addDFLCard(c)
	} else {
		err = n.addOPAECard(c)
	}
	if err != nil {
		return nil, err
	}
	n.Cards = append(n.Cards, c)
	return c, nil
}

func (n *Node) numa(i int) string { return fmt.Sprint(i % 2) }

func (n *Node) writePCIFunction(dir, addr, device string, i int) error {
	files := map[string]string{
		"vendor":           "0x8086",
		"device":           device,
		"class":            "0x120000",
		"subsystem_vendor": "0x8086",
		"subsystem_device": "0x0000",
		"numa_node":        n.numa(i),
		"local_cpulist":    "0-1",
		"uevent":           "DRIVER=dfl-pci\nPCI_CLASS=120000\nPCI_ID=8086:" + strings.TrimPrefix(device, "0x") + "\nPCI_SLOT_NAME=" + addr + "\n",
	}
	if device == "0x09c4" {
		files["sriov_totalvfs"] = "7"
		files["sriov_numvfs"] = "0"
	}
	for name, v := range files {
		if err := writeFile(filepath.Join(dir, name), v+"\n"); err != nil {
			return err
		}
	}
	return n.link(filepath.Join(n.Root, "sys/bus/pci/devices", addr), dir)
}

func (n *Node) id(s string) string {
	if !n.Opts.DashedIDs || len(s) != 32 {
		return s
	}
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// portHome returns the PCI function directory and address for port k of c,
// creating the VF when Opts.VF is set.
func (n *Node) portHome(c *Card, k int) (string, string, error) {
	if !n.Opts.VF {
		return c.PCIPath, c.PCIAddress, nil
	}
	addr := strings.TrimSuffix(c.PCIAddress, ".0") + fmt.Sprintf(".%d", k+1)
	dir := filepath.Join(filepath.Dir(c.PCIPath), addr)
	if err := n.writePCIFunction(dir, addr, "0x09c5", c.Index); err != nil {
		return "", "", err
	}
	if err := n.link(filepath.Join(dir, "physfn"), c.PCIPath); err != nil {
		return "", "", err
	}
	if err := n.link(filepath.Join(c.PCIPath, fmt.Sprintf("virtfn%d", k)), dir); err != nil {
		return "", "", err
	}
	return dir, addr, writeFile(filepath.Join(c.PCIPath, "sriov_numvfs"), fmt.Sprintln(k+1))
}

func (n *Node) addDFLCard(c *Card) error {
	classDir := filepath.Join(n.Root, "sys/class/fpga_region")
	region := func(parent string) (string, error) {
		name := fmt.Sprintf("region%d", n.nextRegion)
		n.nextRegion++
		dir := filepath.Join(parent, "fpga_region", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		return dir, n.link(filepath.Join(classDir, name), dir)
	}
	cardRegion, err := region(c.PCIPath)
	if err != nil {
		return err
	}
	c.FMEName = fmt.Sprintf("dfl-fme.%d", n.nextFME)
	c.FMEPath = filepath.Join(cardRegion, c.FMEName)
	if err := n.writeFME(c, c.FMEPath, MajorDFLFME); err != nil {
		return err
	}
	for _, f := range []string{"pcie0_errors", "pcie1_errors", "nonfatal_errors", "catfatal_errors", "inject_errors", "fme_errors", "first_error", "next_error"} {
		if err := writeFile(filepath.Join(c.FMEPath, "errors", f), "0x0\n"); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(c.FMEPath, "bitstream_metadata"), "0x0\n"); err != nil {
		return err
	}
	for k := 0; k < n.Opts.PortsPerCard; k++ {
		// One FME bridge and PR region per port, each carrying compat_id.
		prParent := filepath.Join(c.FMEPath, fmt.Sprintf("dfl-fme-region.%d", n.nextRegion))
		pr, err := region(prParent)
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(pr, "compat_id"), n.id(c.InterfaceID)+"\n"); err != nil {
			return err
		}
		home, addr, err := n.portHome(c, k)
		if err != nil {
			return err
		}
		portParent := cardRegion
		if n.Opts.VF {
			if portParent, err = region(home); err != nil {
				return err
			}
		}
		if err := n.addPort(c, k, portParent, addr, "dfl-port", MajorDFLPort); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) addOPAECard(c *Card) error {
	classDir := filepath.Join(n.Root, "sys/class/fpga")
	fpgaDev := func(parent string) (string, error) {
		name := fmt.Sprintf("intel-fpga-dev.%d", n.nextRegion)
		n.nextRegion++
		dir := filepath.Join(parent, "fpga", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		return dir, n.link(filepath.Join(classDir, name), dir)
	}
	devDir, err := fpgaDev(c.PCIPath)
	if err != nil {
		return err
	}
	c.FMEName = fmt.Sprintf("intel-fpga-fme.%d", n.nextFME)
	c.FMEPath = filepath.Join(devDir, c.FMEName)
	if err := n.writeFME(c, c.FMEPath, MajorOPAEFME); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.FMEPath, "pr", "interface_id"), n.id(c.InterfaceID)+"\n"); err != nil {
		return err
	}
	for _, f := range []string{"errors", "first_error", "next_error", "pcie0_errors", "pcie1_errors", "nonfatal_errors", "catfatal_errors"} {
		if err := writeFile(filepath.Join(c.FMEPath, "errors", f), "0x0\n"); err != nil {
			return err
		}
	}
	for k := 0; k < n.Opts.PortsPerCard; k++ {
		home, addr, err := n.portHome(c, k)
		if err != nil {
			return err
		}
		parent := devDir
		if n.Opts.VF {
			if parent, err = fpgaDev(home); err != nil {
				return err
			}
		}
		if err := n.addPort(c, k, parent, addr, "intel-fpga-port", MajorOPAEPort); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) writeFME(c *Card, dir string, major int) error {
	minor := n.nextFME
	n.nextFME++
	files := map[string]string{
		"bitstream_id": fmt.Sprintf("0x%016x", 0x2300011001030f+uint64(c.Index)),
		"ports_num":    fmt.Sprint(n.Opts.PortsPerCard),
		"socket_id":    fmt.Sprint(c.Index % 2),
		"uevent":       fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=%s\n", major, minor, filepath.Base(dir)),
	}
	for name, v := range files {
		if err := writeFile(filepath.Join(dir, name), v+"\n"); err != nil {
			return err
		}
	}
	hw := filepath.Join(dir, "hwmon", fmt.Sprintf("hwmon%d", minor))
	for name, v := range map[string]string{"name": "dfl_fme_thermal", "temp1_input": "45000", "temp1_max": "90000", "temp1_crit": "100000"} {
		if err := writeFile(filepath.Join(hw, name), v+"\n"); err != nil {
			return err
		}
	}
	return n.devNode(dir, major, minor)
}

func (n *Node) addPort(c *Card, k int, parent, addr, prefix string, major int) error {
	p := &Port{
		Name:       fmt.Sprintf("%s.%d", prefix, n.nextPort),
		ID:         k,
		PCIAddress: addr,
		Minor:      n.nextPort,
	}
	n.nextPort++
	p.SysfsPath = filepath.Join(parent, p.Name)
	p.DevPath = filepath.Join(n.Root, "dev", p.Name)
	afu := n.Opts.AFUIDs[(c.Index*n.Opts.PortsPerCard+k)%len(n.Opts.AFUIDs)]
	files := map[string]string{
		"id":          fmt.Sprint(k),
		"afu_id":      n.id(afu),
		"power_state": "0x0",
		"uevent":      fmt.Sprintf("MAJOR=%d\nMINOR=%d\nDEVNAME=%s\n", major, p.Minor, p.Name),
	}
	for name, v := range files {
		if err := writeFile(filepath.Join(p.SysfsPath, name), v+"\n"); err != nil {
			return err
		}
	}
	for _, f := range []string{"errors", "first_error", "first_malformed_req"} {
		if err := writeFile(filepath.Join(p.SysfsPath, "errors", f), "0x0\n"); err != nil {
			return err
		}
	}
	if err := n.devNode(p.SysfsPath, major, p.Minor); err != nil {
		return err
	}
	c.Ports = append(c.Ports, p)
	return nil
}

// devNode writes the sysfs dev file, the /sys/dev/char link, the /dev node
// and udev's /dev/char link to it.
func (n *Node) devNode(sysDir string, major, minor int) error {
	mm := fmt.Sprintf("%d:%d", major, minor)
	if err := writeFile(filepath.Join(sysDir, "dev"), mm+"\n"); err != nil {
		return err
	}
	if err := n.link(filepath.Join(n.Root, "sys/dev/char", mm), sysDir); err != nil {
		return err
	}
	node := filepath.Join(n.Root, "dev", filepath.Base(sysDir))
	if err := n.mknod(node, major, minor); err != nil {
		return err
	}
	return n.link(filepath.Join(n.Root, "dev/char", mm), node)
}

func (n *Node) mknod(path string, major, minor int) error {
	_ = os.Remove(path)
	if !n.RegularFiles {
		err := unix.Mknod(path, unix.S_IFCHR|0o660, int(unix.Mkdev(uint32(major), uint32(minor))))
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
			return fmt.Errorf("mknod %s: %w", path, err)
		}
		n.RegularFiles = true
	}
	return writeFile(path, "")
}

// link makes at a relative symlink to target, as sysfs links are.
func (n *Node) link(at, target string) error {
	rel, err := filepath.Rel(filepath.Dir(at), target)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
		return err
	}
	_ = os.Remove(at)
	return os.Symlink(rel, at)
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
