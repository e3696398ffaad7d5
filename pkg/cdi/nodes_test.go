package cdi

import (
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	_ "github.com/fpga-dra/fpga-dra-driver/pkg/family/xrt" // scans read XRT cards
)

// TestContainerNodesRefusesManagementNodes: a container gets a port's
// nodes (CDI spec or device-plugin Allocate) only when none is a management node of its card (by path
// or device number) and every path is absolute. Discovery never lists
// such a node for a port, so this is checked on hand-built devices.
func TestContainerNodesRefusesManagementNodes(t *testing.T) {
	card := &discovery.Card{
		PCIAddress: "0000:01:00.0",
		FME:        discovery.DevNode{Name: "dfl-fme.0", Path: "/dev/dfl-fme.0", Major: 240, Minor: 0},
		Management: []discovery.DevNode{{Name: "xclmgmt256", Path: "/dev/xclmgmt256", Major: 241, Minor: 0}},
	}
	port := discovery.DevNode{Name: "dfl-port.0", Path: "/dev/dfl-port.0", Major: 240, Minor: 1}
	for _, tc := range []struct {
		name  string
		extra []discovery.DevNode
		want  string // in the error; "" for none
	}{
		{name: "port node only"},
		{name: "user node", extra: []discovery.DevNode{{Path: "/dev/dri/renderD128", Major: 226, Minor: 128}}},
		{name: "fme by path", extra: []discovery.DevNode{{Path: "/dev/dfl-fme.0"}}, want: "management node /dev/dfl-fme.0"},
		{name: "xclmgmt by number", extra: []discovery.DevNode{{Path: "/dev/xfpga/user", Major: 241, Minor: 0}}, want: "management node /dev/xclmgmt256"},
		{name: "relative path", extra: []discovery.DevNode{{Path: "dev/dfl-port.1"}}, want: "not absolute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &discovery.Port{PCIAddress: card.PCIAddress, Node: port, ExtraNodes: tc.extra}
			nodes, err := ContainerNodes(card, p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ContainerNodes: %v", err)
			case tc.want == "" && len(nodes) != 1+len(tc.extra):
				t.Errorf("ContainerNodes returned %v, want the port's %d nodes", nodes, 1+len(tc.extra))
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("ContainerNodes: nodes %v, error %v; want an error containing %q", nodes, err, tc.want)
			case tc.want != "" && nodes != nil:
				t.Errorf("ContainerNodes returned nodes %v with its error", nodes)
			}
		})
	}
}

// TestContainerNodesRefusesManagementNodesOfAnyCard: a management node is
// refused by its name too, not only when it is one its own card lists: the
// FME of another card (a port's nodes confused between cards), and an
// Alveo management function's xfpga node (/dev/xfpga/flash.m<instance>,
// which can flash the card), which Card.Management does not list.
func TestContainerNodesRefusesManagementNodesOfAnyCard(t *testing.T) {
	card := &discovery.Card{
		PCIAddress: "0000:01:00.0",
		FME:        discovery.DevNode{Name: "dfl-fme.0", Path: "/dev/dfl-fme.0", Major: 240, Minor: 0},
	}
	alveo := &discovery.Card{
		Driver:     discovery.DriverXRT,
		PCIAddress: "0000:3c:00.1",
		Management: []discovery.DevNode{{Name: "xclmgmt15360", Path: "/dev/xclmgmt15360", Major: 505, Minor: 0}},
	}
	for _, tc := range []struct {
		name string
		card *discovery.Card
		node discovery.DevNode
		want string
	}{
		{name: "another card's DFL FME", card: card, node: discovery.DevNode{Name: "dfl-fme.1", Path: "/dev/dfl-fme.1", Major: 240, Minor: 1}, want: "/dev/dfl-fme.1"},
		{name: "another card's OPAE FME", card: card, node: discovery.DevNode{Name: "intel-fpga-fme.1", Path: "/dev/intel-fpga-fme.1", Major: 241, Minor: 1}, want: "/dev/intel-fpga-fme.1"},
		{name: "another card's xclmgmt", card: alveo, node: discovery.DevNode{Name: "xclmgmt15616", Path: "/dev/xclmgmt15616", Major: 505, Minor: 1}, want: "/dev/xclmgmt15616"},
		{name: "xfpga management node", card: alveo, node: discovery.DevNode{Name: "flash.m15360", Path: "/dev/xfpga/flash.m15360", Major: 506, Minor: 64}, want: "/dev/xfpga/flash.m15360"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &discovery.Port{PCIAddress: tc.card.PCIAddress, Node: discovery.DevNode{Name: "dfl-port.0", Path: "/dev/dfl-port.0", Major: 250, Minor: 0}, ExtraNodes: []discovery.DevNode{tc.node}}
			nodes, err := ContainerNodes(tc.card, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || nodes != nil {
				t.Errorf("ContainerNodes: nodes %v, error %v; want the management node %s refused", nodes, err, tc.want)
			}
		})
	}
	// User nodes whose names look alike stay allowed.
	p := &discovery.Port{PCIAddress: alveo.PCIAddress, Node: discovery.DevNode{Name: "renderD128", Path: "/dev/dri/renderD128", Major: 226, Minor: 128},
		ExtraNodes: []discovery.DevNode{{Name: "dma.qdma.u15361.0", Path: "/dev/xfpga/dma.qdma.u15361.0", Major: 506, Minor: 0}}}
	if _, err := ContainerNodes(alveo, p); err != nil {
		t.Errorf("ContainerNodes(user nodes): %v", err)
	}
}
