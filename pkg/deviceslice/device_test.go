package deviceslice

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// driverName qualifies the attributes in these tests.
const driverName = "fpga.example.com"

// TestDevicesLeaveOutUnreportedAttributes: what the kernel did not report
// (socket_id, PCI IDs, bitstream_id, NUMA affinity) is left out of the
// device, never published as 0 or "", so a selector on it fails to match.
func TestDevicesLeaveOutUnreportedAttributes(t *testing.T) {
	port := &discovery.Port{ID: 0, PCIAddress: "0000:81:00.0", Node: discovery.DevNode{Name: "dfl-port.0"}, AFUID: simnode.SampleAFUID, Health: discovery.Health{Healthy: true},
		Attributes: []discovery.Attribute{{Name: "portID", Value: int64(0)}}}
	res := &discovery.Result{Drivers: []discovery.KernelDriver{discovery.DriverDFL}, Cards: []*discovery.Card{{
		Driver: discovery.DriverDFL, PCIAddress: "0000:81:00.0", NUMANode: -1, SocketID: -1,
		InterfaceID: simnode.DefaultInterfaceID, Ports: []*discovery.Port{port},
	}}}
	devices := Devices(res, Options{DriverName: driverName, Root: t.TempDir()})
	if len(devices) != 1 {
		t.Fatalf("%d devices, want 1", len(devices))
	}
	attrs := devices[0].Attributes
	for _, name := range []string{"socketID", AttrNUMANode, AttrVendorID, AttrDeviceID, AttrModel, "bitstreamID"} {
		if a, ok := attrs[resourceapi.QualifiedName(driverName+"/"+name)]; ok {
			t.Errorf("unreported %s published as %+v", name, a)
		}
	}
	for _, name := range []string{AttrInterfaceID, AttrAFUID, "portID"} {
		if _, ok := attrs[resourceapi.QualifiedName(driverName+"/"+name)]; !ok {
			t.Errorf("%s missing", name)
		}
	}
}
