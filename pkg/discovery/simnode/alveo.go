package simnode

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Alveo cards as XRT lays them out: a management PF (function 0, bound to
// xclmgmt) and a user PF (function 1, bound to xocl) per card, in their own
// PCI domain (0001, so they mix with the Intel cards of domain 0000), with
// the user PF's DRM render node, its
// /dev/xfpga user nodes where the shell has them, and the management node
// /dev/xclmgmt<instance> that discovery must never hand to a container.

// Character device majors of the simulated Alveo nodes: DRM's fixed 226,
// and dynamic ones for xclmgmt and the xfpga user nodes.
const (
	MajorDRM     = 226
	MajorXclmgmt = 505
	MajorXfpga   = 506
)

// AlveoModel is a common Alveo card as the simulated node writes it.
type AlveoModel struct {
	// Name is the model's key ("u250").
	Name string
	// MgmtDevice and UserDevice are the PCI device IDs of the two PFs.
	MgmtDevice, UserDevice string
	// Platform is the shell's VBNV, Timestamp its build timestamp.
	Platform, Timestamp string
	// InterfaceIDs are the shell's interface UUIDs (canonical); LogicID
	// the shell's logic UUID.
	InterfaceIDs []string
	LogicID      string
	// QDMA gives the user PF an xfpga QDMA user node.
	QDMA bool
}

// AlveoModels are the cards Options.Alveo names.
var AlveoModels = map[string]AlveoModel{
	"u250": {Name: "u250", MgmtDevice: "0x5004", UserDevice: "0x5005",
		Platform: "xilinx_u250_gen3x16_xdma_shell_4_1", Timestamp: "1605146832",
		InterfaceIDs: []string{U250InterfaceID}, LogicID: "b3d56ba8c6014d33bd3b3f35ad00a6d5"},
	"u55c": {Name: "u55c", MgmtDevice: "0x505c", UserDevice: "0x505d",
		Platform: "xilinx_u55c_gen3x16_xdma_base_3", Timestamp: "1649373632",
		InterfaceIDs: []string{U55CInterfaceID, U55CSecondInterfaceID}, LogicID: "97088961feaeda9174fd4cf8e4b0e9d3", QDMA: true},
}

// Interface UUIDs of the simulated shells.
const (
	U250InterfaceID       = "15ed1a8ef16fc4f3b6b2fdb2f3e9a6a8"
	U55CInterfaceID       = "2f2e7e7b9a9b4b0c8c1d2b3a4c5d6e7f"
	U55CSecondInterfaceID = "3a4b5c6d7e8f40918a2b3c4d5e6f7a8b"
	// SampleXclbinUUID is loaded nowhere; the simulate command's sample
	// repository has an xclbin of it for each simulated shell.
	SampleXclbinUUID = "c0ffee00c0ffee00c0ffee00c0ffee00"
)

// AlveoCard is one simulated Alveo card.
type AlveoCard struct {
	Index int
	Model AlveoModel
	// UserAddress and MgmtAddress are the two PFs' BDFs; UserPath and
	// MgmtPath their sysfs directories.
	UserAddress, MgmtAddress string
	UserPath, MgmtPath       string
	// Instance is the user PF's XRT instance.
	Instance int
	// RenderPath, MgmtDevPath and XfpgaPaths are /dev nodes below Root.
	RenderPath, MgmtDevPath string
	XfpgaPaths              []string
}

// AddAlveo adds an Alveo card of the given model (hot-plug) and returns
// it.
func (n *Node) AddAlveo(model string) (*AlveoCard, error) {
	m, ok := AlveoModels[model]
	if !ok {
		names := make([]string, 0, len(AlveoModels))
		for k := range AlveoModels {
			names = append(names, k)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("simulated Alveo model %q is not one of %s", model, strings.Join(names, ", "))
	}
	j := len(n.Alveo)
	if j >= maxCards {
		return nil, fmt.Errorf("the simulated PCI topology holds at most %d Alveo cards", maxCards)
	}
	const domain = 1
	rootBus := (j / 31) * 0x40
	bus := rootBus + 1 + j%31
	c := &AlveoCard{
		Index:       j,
		Model:       m,
		MgmtAddress: fmt.Sprintf("%04x:%02x:00.0", domain, bus),
		UserAddress: fmt.Sprintf("%04x:%02x:00.1", domain, bus),
		Instance:    domain*65536 + bus*256 + 1,
	}
	bridge := filepath.Join(n.Root, "sys/devices", fmt.Sprintf("pci%04x:%02x", domain, rootBus), fmt.Sprintf("%04x:%02x:%02x.0", domain, rootBus, 1+j%31))
	c.MgmtPath = filepath.Join(bridge, c.MgmtAddress)
	c.UserPath = filepath.Join(bridge, c.UserAddress)
	numa := n.numa(j)
	if err := n.alveoFunction(c.MgmtPath, c.MgmtAddress, m.MgmtDevice, "xclmgmt", numa); err != nil {
		return nil, err
	}
	mgmtInstance := c.Instance - 1
	for name, v := range map[string]string{"mgmt_pf": "", "instance": fmt.Sprint(mgmtInstance), "dev_offline": "0", "ready": "0x1"} {
		if err := writeFile(filepath.Join(c.MgmtPath, name), v+"\n"); err != nil {
			return nil, err
		}
	}
	c.MgmtDevPath = filepath.Join(n.Root, "dev", fmt.Sprintf("xclmgmt%d", mgmtInstance))
	if err := n.charDev(filepath.Join(c.MgmtPath, "xclmgmt"), c.MgmtDevPath, MajorXclmgmt, j); err != nil {
		return nil, err
	}

	if err := n.writeAlveoUser(c, m, numa); err != nil {
		return nil, err
	}
	// The management side's xfpga nodes are never a user's.
	mgmtNode := fmt.Sprintf("flash.m%d", mgmtInstance)
	if err := n.charDev(filepath.Join(c.MgmtPath, "flash", mgmtNode), filepath.Join(n.Root, "dev/xfpga", mgmtNode), MajorXfpga, 64+j); err != nil {
		return nil, err
	}
	n.Alveo = append(n.Alveo, c)
	return c, nil
}

// alveoFunction writes one PCI function of an Alveo card at dir, bound to
// driver, with its bus and driver links.
func (n *Node) alveoFunction(dir, addr, device, driver, numa string) error {
	files := map[string]string{
		"vendor": "0x10ee", "device": device, "class": "0x120000", "numa_node": numa, "local_cpulist": "0-1",
		"subsystem_vendor": "0x10ee", "subsystem_device": "0x000e",
		"uevent": "DRIVER=" + driver + "\nPCI_ID=10EE:" + strings.ToUpper(strings.TrimPrefix(device, "0x")) + "\nPCI_SLOT_NAME=" + addr + "\n",
	}
	for name, v := range files {
		if err := writeFile(filepath.Join(dir, name), v+"\n"); err != nil {
			return err
		}
	}
	if err := n.link(filepath.Join(n.Root, "sys/bus/pci/devices", addr), dir); err != nil {
		return err
	}
	return n.link(filepath.Join(n.Root, "sys/bus/pci/drivers", driver, addr), dir)
}

// writeAlveoUser writes card c's user PF: its attributes, DRM nodes and
// (on a QDMA shell) its xfpga user node.
func (n *Node) writeAlveoUser(c *AlveoCard, m AlveoModel, numa string) error {
	j := c.Index
	if err := n.alveoFunction(c.UserPath, c.UserAddress, m.UserDevice, "xocl", numa); err != nil {
		return err
	}
	ids := make([]string, len(m.InterfaceIDs))
	for i, id := range m.InterfaceIDs {
		ids[i] = n.id(id)
	}
	files := map[string]string{
		"user_pf":                "",
		"interface_uuids":        strings.Join(ids, "\n"),
		"logic_uuids":            n.id(m.LogicID),
		"xclbinuuid":             "",
		"ready":                  "0x1",
		"dev_offline":            "0",
		"kdsstat":                "xclbin:\noutstanding execs: 0\ntotal execs: 0\ncontexts: 0\n",
		"rom.u.0/VBNV":           m.Platform,
		"rom.u.0/timestamp":      m.Timestamp,
		"rom.u.0/FPGA":           "xcu250-figd2104-2L-e",
		"xmc.u.0/serial_num":     fmt.Sprintf("21330%07d", j),
		"xmc.u.0/xmc_fpga_temp":  "45",
		"icap.u.0/idcode":        "0x4b57093",
		"mailbox.u.0/mailbox_ok": "1",
	}
	if n.Opts.AlveoXclbinUUID != "" {
		files["xclbinuuid"] = dashed(n.Opts.AlveoXclbinUUID)
	}
	for name, v := range files {
		if err := writeFile(filepath.Join(c.UserPath, name), v+"\n"); err != nil {
			return err
		}
	}
	render := fmt.Sprintf("renderD%d", 128+j)
	c.RenderPath = filepath.Join(n.Root, "dev/dri", render)
	if err := n.charDev(filepath.Join(c.UserPath, "drm", render), c.RenderPath, MajorDRM, 128+j); err != nil {
		return err
	}
	if err := n.charDev(filepath.Join(c.UserPath, "drm", fmt.Sprintf("card%d", j)), filepath.Join(n.Root, "dev/dri", fmt.Sprintf("card%d", j)), MajorDRM, j); err != nil {
		return err
	}
	if m.QDMA {
		name := fmt.Sprintf("dma.qdma.u%d.0", c.Instance)
		path := filepath.Join(n.Root, "dev/xfpga", name)
		if err := n.charDev(filepath.Join(c.UserPath, "dma.qdma.u.0", name), path, MajorXfpga, j); err != nil {
			return err
		}
		c.XfpgaPaths = append(c.XfpgaPaths, path)
	}
	return nil
}

// charDev writes a character device's sysfs dev file and /sys/dev/char
// link, its node at path and udev's /dev/char link to it.
func (n *Node) charDev(sysDir, path string, major, minor int) error {
	mm := fmt.Sprintf("%d:%d", major, minor)
	if err := writeFile(filepath.Join(sysDir, "dev"), mm+"\n"); err != nil {
		return err
	}
	if err := n.link(filepath.Join(n.Root, "sys/dev/char", mm), sysDir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := n.mknod(path, major, minor); err != nil {
		return err
	}
	return n.link(filepath.Join(n.Root, "dev/char", mm), path)
}

// SetXclbin writes the user PF's xclbinuuid as XRT prints it after a load
// (dashed; "" unloads).
func (n *Node) SetXclbin(c *AlveoCard, uuid string) error {
	return replaceFile(filepath.Join(c.UserPath, "xclbinuuid"), dashed(uuid)+"\n")
}

// SetAlveoStatus writes a user PF status attribute ("ready", "dev_offline").
func (n *Node) SetAlveoStatus(c *AlveoCard, name, value string) error {
	return replaceFile(filepath.Join(c.UserPath, name), value+"\n")
}

// dashed prints a canonical ID as a dashed UUID, as XRT does.
func dashed(id string) string {
	if len(id) != 32 {
		return id
	}
	return id[0:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:]
}
