package deviceplugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// testDevices returns af devices "c<card>p<port>" for cards with the given
// port counts; card i is on NUMA node numa[i].
func testDevices(ports []int, numa []int) map[string]*device {
	out := map[string]*device{}
	for i, n := range ports {
		card := &discovery.Card{PCIAddress: string(rune('a' + i)), NUMANode: numa[i]}
		for k := 0; k < n; k++ {
			id := "c" + string(rune('0'+i)) + "p" + string(rune('0'+k))
			out[id] = &device{id: id, card: card}
		}
	}
	return out
}

func TestPreferred(t *testing.T) {
	// Card 0 (NUMA 0): 1 port, card 1 (NUMA 1): 2, card 2 (NUMA 1): 3,
	// card 3 (NUMA 0): 2.
	devs := testDevices([]int{1, 2, 3, 2}, []int{0, 1, 1, 0})
	all := []string{"c0p0", "c1p0", "c1p1", "c2p0", "c2p1", "c2p2", "c3p0", "c3p1"}
	for _, tc := range []struct {
		name      string
		available []string
		must      []string
		size      int
		want      []string
	}{
		{"one device: the smallest card that fits", all, nil, 1, []string{"c0p0"}},
		{"two devices: one card, the smallest that fits", all, nil, 2, []string{"c1p0", "c1p1"}},
		{"three devices: the one card that fits", all, nil, 3, []string{"c2p0", "c2p1", "c2p2"}},
		{"must-include: fill its card first", all, []string{"c2p1"}, 2, []string{"c2p1", "c2p0"}},
		{"must-include: then its NUMA node", all, []string{"c0p0"}, 3, []string{"c0p0", "c3p0", "c3p1"}},
		{"no card fits: one NUMA node, largest card first", all, nil, 5, []string{"c2p0", "c2p1", "c2p2", "c1p0", "c1p1"}},
		{"no NUMA node fits: spill over", []string{"c0p0", "c1p0", "c3p0"}, nil, 3, []string{"c0p0", "c3p0", "c1p0"}},
		{"unknown devices come last", []string{"x", "c1p0"}, nil, 2, []string{"c1p0", "x"}},
		{"must-include only", all, []string{"c3p1", "c3p1"}, 1, []string{"c3p1"}},
		{"too few available", []string{"c1p0"}, nil, 2, []string{"c1p0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := preferred(devs, tc.available, tc.must, tc.size)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("preferred (-want +got):\n%s", diff)
			}
		})
	}
}
