package renumber

import (
	"maps"
	"slices"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// result is a node with one card whose ports have the given main nodes,
// as path and minor number under major 508.
func result(nodes map[int]node) *discovery.Result {
	c := &discovery.Card{PCIAddress: "0000:81:00.0"}
	for id := 0; id < len(nodes); id++ {
		n := nodes[id]
		c.Ports = append(c.Ports, &discovery.Port{ID: id, PCIAddress: c.PCIAddress,
			Node: discovery.DevNode{Path: n.path, Major: 508, Minor: n.minor}})
	}
	return &discovery.Result{Cards: []*discovery.Card{c}}
}

type node struct {
	path  string
	minor uint32
}

func TestGone(t *testing.T) {
	before := result(map[int]node{0: {"/dev/dfl-port.0", 0}, 1: {"/dev/dfl-port.1", 1}})
	port0 := before.Cards[0].Ports[0].DeviceName()
	granted := List(Port(before.Cards[0].Ports[0]))
	tests := []struct {
		name            string
		now             *discovery.Result
		stale, vanished []string
		ok              bool
	}{
		{name: "unchanged", now: before, ok: true},
		{name: "swapped: the number reaches the other port", now: result(map[int]node{0: {"/dev/dfl-port.0", 1}, 1: {"/dev/dfl-port.1", 0}}), stale: granted, ok: true},
		{name: "gone from every port", now: result(map[int]node{0: {"/dev/dfl-port.5", 7}, 1: {"/dev/dfl-port.1", 1}}), vanished: granted, ok: true},
		{name: "port missing tells nothing", now: &discovery.Result{}, ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stale, vanished, ok := Gone(granted, []string{port0}, tc.now)
			if ok != tc.ok || !slices.Equal(stale, tc.stale) || !slices.Equal(vanished, tc.vanished) {
				t.Errorf("Gone = stale %v, vanished %v, ok %v; want %v, %v, %v", stale, vanished, ok, tc.stale, tc.vanished, tc.ok)
			}
		})
	}
}

func TestUsing(t *testing.T) {
	devs := result(map[int]node{0: {"/dev/dfl-port.0", 0}, 1: {"/dev/dfl-port.1", 1}})
	got := Using(devs, func(n string) bool { return n == "508:1" })
	want := map[string]string{devs.Cards[0].Ports[1].DeviceName(): "508:1"}
	if !maps.Equal(got, want) {
		t.Errorf("Using = %v, want %v", got, want)
	}
}
