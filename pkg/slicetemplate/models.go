package slicetemplate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// CardModel is an FPGA card as far as a template needs it: what the
// driver reads from the card's PCI functions and how many devices (ports)
// it publishes per card. Everything else a template holds comes from
// scanning a simulated node of the model with the driver's own discovery.
type CardModel struct {
	// Name selects the model (`template --model NAME`, Shape.Model): a
	// short lowercase label.
	Name string
	// Drivers are the kernel drivers that can expose the card, the one a
	// shape gets when it names none first.
	Drivers []discovery.KernelDriver
	// VendorID and DeviceID are the PCI IDs of the function the driver
	// publishes the card by: an Intel card's physical function that
	// carries its management engine ("0x8086", "0x09c4"), an Alveo card's
	// user PF ("0x10ee", "0x5005").
	VendorID, DeviceID string
	// VFDeviceID is the PCI device ID of the card's SR-IOV virtual
	// functions; empty when the driver publishes no VF ports for it.
	VFDeviceID string
	// PortsPerCard is how many accelerator ports, each one published
	// device, one card has.
	PortsPerCard int
}

// models holds one entry per card model. A new model, of a family the
// simulated-node writer lays out, is one entry here.
var models = []CardModel{
	{Name: "pac-a10", Drivers: dflOrOPAE, VendorID: "0x8086", DeviceID: "0x09c4", VFDeviceID: "0x09c5", PortsPerCard: 1},
	{Name: "pac-d5005", Drivers: dflOrOPAE, VendorID: "0x8086", DeviceID: "0x0b2b", VFDeviceID: "0x0b2c", PortsPerCard: 1},
	{Name: "pac-n3000", Drivers: dflOrOPAE, VendorID: "0x8086", DeviceID: "0x0b30", VFDeviceID: "0x0b31", PortsPerCard: 1},
	{Name: "dfl-card", Drivers: dflOnly, VendorID: "0x8086", DeviceID: "0xbcce", VFDeviceID: "0xbccf", PortsPerCard: 1},
	{Name: "silicom-n5010", Drivers: dflOnly, VendorID: "0x1c2c", DeviceID: "0x1000", PortsPerCard: 1},
	{Name: "silicom-n5011", Drivers: dflOnly, VendorID: "0x1c2c", DeviceID: "0x1001", PortsPerCard: 1},
	// Alveo cards (XRT) are named as package simnode's AlveoModels, which
	// lay each out with the shell AMD ships for it: the shell's platform,
	// timestamp, logic UUID and further interface UUIDs are the model's,
	// the first interface UUID is the shape's.
	{Name: "u250", Drivers: xrtOnly, VendorID: "0x10ee", DeviceID: "0x5005", PortsPerCard: 1},
	{Name: "u55c", Drivers: xrtOnly, VendorID: "0x10ee", DeviceID: "0x505d", PortsPerCard: 1},
}

var (
	dflOrOPAE = []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE}
	dflOnly   = []discovery.KernelDriver{discovery.DriverDFL}
	xrtOnly   = []discovery.KernelDriver{discovery.DriverXRT}
)

// Models returns every card model a template can describe, in table order.
func Models() []CardModel { return slices.Clone(models) }

// ModelNames returns the names of every card model, for help texts and
// errors.
func ModelNames() []string {
	names := make([]string, len(models))
	for i, m := range models {
		names[i] = m.Name
	}
	return names
}

// LookupModel returns the card model called name.
func LookupModel(name string) (CardModel, error) {
	for _, m := range models {
		if m.Name == name {
			return m, nil
		}
	}
	return CardModel{}, fmt.Errorf("model %q is not a known card model: use one of %s", name, strings.Join(ModelNames(), ", "))
}
