package cdi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

const (
	testVendor      = "fpga.dra.dev"
	testClass       = "port"
	testClaimUID    = "0e7f4a3b-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	testOtherUID    = "b2c1d0e9-f8a7-4b6c-9d5e-4f3a2b1c0d9e"
	testInterfaceID = "69528db6eb31577a8c3668f9faa081f6"
	testAFUID0      = "d8424dc4a4a3c413f89e433683f9040b"
	testAFUID1      = "f7df405cbd7acf7222f144b0b93acd18"
	testFMEMajor    = 240
	testPortMajor   = 241
)

// testCard returns a DFL card below a simulated root with its FME and two
// ports, the second on an SR-IOV virtual function.
func testCard(root string) *discovery.Card {
	node := func(name string, major, minor uint32) discovery.DevNode {
		return discovery.DevNode{
			Name:      name,
			SysfsPath: root + "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/fpga_region/region0/" + name,
			Path:      "/dev/" + name,
			HostPath:  root + "/dev/" + name,
			Major:     major,
			Minor:     minor,
		}
	}
	return &discovery.Card{
		Driver:      discovery.DriverDFL,
		PCIAddress:  "0000:81:00.0",
		VendorID:    "0x8086",
		DeviceID:    "0x09c4",
		FME:         node("dfl-fme.0", testFMEMajor, 0),
		PortsNum:    2,
		InterfaceID: testInterfaceID,
		Ports: []*discovery.Port{
			{Node: node("dfl-port.0", testPortMajor, 0), ID: 0, PCIAddress: "0000:81:00.0",
				AFUID: testAFUID0, Health: discovery.Health{Healthy: true}},
			{Node: node("dfl-port.1", testPortMajor, 1), ID: 1, PCIAddress: "0000:81:00.1", VirtualFunction: true,
				AFUID: testAFUID1, Health: discovery.Health{Healthy: true}},
		},
	}
}

// testDevices returns one Device per port of card, the first with an AFU
// loaded by programming.
func testDevices(card *discovery.Card, programmedAFUID string) []Device {
	return []Device{
		NewDevice(card, card.Ports[0], programmedAFUID),
		NewDevice(card, card.Ports[1], ""),
	}
}

func newTestWriter(t *testing.T) (*Writer, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cdi")
	w, err := NewWriter(testVendor, testClass, dir)
	if err != nil {
		t.Fatalf("NewWriter() error = %v", err)
	}
	return w, dir
}

// dirNames returns the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(%s) error = %v", dir, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func specFile(uid string) string {
	return testVendor + "-" + testClass + "_" + uid + ".json"
}
