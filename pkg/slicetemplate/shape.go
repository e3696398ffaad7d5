package slicetemplate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// Shape is the FPGA side of a node shape (an instance type, a node group):
// which cards its nodes carry and how the driver runs there. Everything in
// it is known before a node boots.
type Shape struct {
	// Model is a card model name (Models).
	Model string `json:"model"`
	// Cards is how many cards of the model a node has.
	Cards int `json:"cards"`
	// KernelDriver is the kernel driver of the node image (dfl, opae, xrt);
	// the model's first driver when empty.
	KernelDriver discovery.KernelDriver `json:"kernelDriver,omitempty"`
	// InterfaceID is the interface ID of the cards' partial-reconfiguration
	// region, fixed by the FPGA interface manager (FIM) flashed on them, or
	// on an Alveo card the (first) interface UUID of its shell (32 hex
	// digits, dashes allowed).
	InterfaceID string `json:"interfaceID"`
	// VirtualFunctions puts every port on its own SR-IOV virtual function,
	// as nodes that enable VFs have them.
	VirtualFunctions bool `json:"virtualFunctions,omitempty"`
	// Programmable is the daemon's --programmable on these nodes; nil
	// means true, its default.
	Programmable *bool `json:"programmable,omitempty"`
}

// ParseShape decodes a Shape from JSON strictly (an unknown field is an
// error) and validates it; the result is normalised (canonical interface
// ID, the kernel driver set).
func ParseShape(data []byte) (Shape, error) {
	var s Shape
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Shape{}, fmt.Errorf("decode FPGA node shape: %w (fields: model, cards, kernelDriver, interfaceID, virtualFunctions, programmable)", err)
	}
	if dec.More() {
		return Shape{}, fmt.Errorf("decode FPGA node shape: data after the object: give exactly one JSON object")
	}
	_, s, err := s.normalize()
	return s, err
}

// normalize validates s and returns its model and s with the canonical
// interface ID and the kernel driver set.
func (s Shape) normalize() (CardModel, Shape, error) {
	m, err := LookupModel(s.Model)
	if err != nil {
		return CardModel{}, s, fmt.Errorf("model: %w", err)
	}
	if s.Cards < 1 {
		return m, s, fmt.Errorf("cards %d: a node shape with FPGAs has at least 1 card", s.Cards)
	}
	if s.KernelDriver == "" {
		s.KernelDriver = m.Drivers[0]
	}
	if !slices.Contains(m.Drivers, s.KernelDriver) {
		return m, s, fmt.Errorf("kernelDriver %q: model %s is exposed by %s", s.KernelDriver, m.Name, joinDrivers(m.Drivers))
	}
	if s.VirtualFunctions && m.VFDeviceID == "" {
		return m, s, fmt.Errorf("virtualFunctions: model %s has no virtual functions the driver publishes; leave it false", m.Name)
	}
	if s.InterfaceID == "" {
		return m, s, fmt.Errorf("interfaceID is required: the interface ID of the FIM flashed on the cards (on a running node: `fpga-dra-driver discover` shows it, or sysfs compat_id / interface_id)")
	}
	id, err := discovery.CanonicalID(s.InterfaceID)
	if err != nil {
		return m, s, fmt.Errorf("interfaceID: %w; give the 32 hex digits the node's interfaceID attribute shows", err)
	}
	s.InterfaceID = id
	return m, s, nil
}

func (s Shape) programmable() bool { return s.Programmable == nil || *s.Programmable }

func joinDrivers(ds []discovery.KernelDriver) string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = string(d)
	}
	return strings.Join(names, " or ")
}

// WriteNode writes a simulated node of the shape below dir (package
// simnode's layout of the shape's kernel driver, with the model's PCI IDs,
// or simnode's Alveo card of the model): the tree a node of the shape
// shows the driver. Intel ports carry simnode's default AFUs; Alveo cards
// no xclbin.
func WriteNode(dir string, s Shape) (*simnode.Node, error) {
	m, s, err := s.normalize()
	if err != nil {
		return nil, err
	}
	return writeNode(dir, m, s, false)
}

// writeNode is WriteNode for a normalised shape; regularFiles writes /dev
// entries as regular files (a template needs no device nodes).
func writeNode(dir string, m CardModel, s Shape, regularFiles bool) (*simnode.Node, error) {
	if s.KernelDriver == discovery.DriverXRT {
		return writeAlveoNode(dir, m, s, regularFiles)
	}
	n, err := simnode.Write(dir, simnode.Options{
		Driver: s.KernelDriver, Cards: s.Cards, PortsPerCard: m.PortsPerCard,
		VF: s.VirtualFunctions, InterfaceID: s.InterfaceID, RegularFiles: regularFiles,
	})
	if err != nil {
		return nil, fmt.Errorf("write a simulated %s node: %w", m.Name, err)
	}
	// simnode writes Intel PAC Arria 10 functions; the models of one
	// family share the layout and differ in their PCI IDs. The tree is
	// new and nothing reads it yet, so plain writes suffice.
	for _, c := range n.Cards {
		if err := setPCIIDs(c.PCIPath, m.VendorID, m.DeviceID); err != nil {
			return nil, err
		}
		for _, p := range c.Ports {
			if p.PCIAddress == c.PCIAddress {
				continue
			}
			vf, err := filepath.EvalSymlinks(filepath.Join(n.Root, "sys/bus/pci/devices", p.PCIAddress))
			if err != nil {
				return nil, err
			}
			if err := setPCIIDs(vf, m.VendorID, m.VFDeviceID); err != nil {
				return nil, err
			}
		}
	}
	return n, nil
}

// writeAlveoNode writes the shape's Alveo cards, each with the shape's
// interface ID as its shell's first interface UUID.
func writeAlveoNode(dir string, m CardModel, s Shape, regularFiles bool) (*simnode.Node, error) {
	n, err := simnode.Write(dir, simnode.Options{Alveo: slices.Repeat([]string{m.Name}, s.Cards), RegularFiles: regularFiles})
	if err != nil {
		return nil, fmt.Errorf("write a simulated %s node: %w", m.Name, err)
	}
	for _, c := range n.Alveo {
		ids := slices.Clone(c.Model.InterfaceIDs)
		ids[0] = s.InterfaceID
		if err := os.WriteFile(filepath.Join(c.UserPath, "interface_uuids"), []byte(strings.Join(ids, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// setPCIIDs rewrites a simulated PCI function's vendor, device and the
// PCI_ID line of its uevent.
func setPCIIDs(dir, vendor, device string) error {
	for name, v := range map[string]string{"vendor": vendor, "device": device} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	path := filepath.Join(dir, "uevent")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "PCI_ID=") {
			lines[i] = "PCI_ID=" + strings.TrimPrefix(vendor, "0x") + ":" + strings.TrimPrefix(device, "0x")
		}
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}
