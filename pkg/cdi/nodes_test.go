package cdi

import (
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
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
