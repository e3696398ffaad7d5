package discovery_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func writeNode(t testing.TB, opts simnode.Options) *simnode.Node {
	t.Helper()
	n, err := simnode.Write(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("write simulated node: %v", err)
	}
	return n
}

func scan(t testing.TB, root string) *discovery.Result {
	t.Helper()
	res, err := (&discovery.Scanner{Root: root}).Scan()
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return res
}

func TestScan(t *testing.T) {
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		for _, tc := range []struct {
			name         string
			cards, ports int
			vf, dashed   bool
		}{
			{name: "two cards", cards: 2, ports: 1},
			{name: "multi-port", cards: 1, ports: 3},
			{name: "sriov vf", cards: 2, ports: 2, vf: true},
			{name: "dashed ids", cards: 2, ports: 1, dashed: true},
		} {
			t.Run(fmt.Sprintf("%s/%s", drv, tc.name), func(t *testing.T) {
				n := writeNode(t, simnode.Options{Driver: drv, Cards: tc.cards, PortsPerCard: tc.ports, VF: tc.vf, DashedIDs: tc.dashed})
				res := scan(t, n.Root)
				if len(res.Drivers) != 1 || res.Drivers[0] != drv {
					t.Fatalf("detected %v, want %q", res.Drivers, drv)
				}
				if len(res.Errors) != 0 {
					t.Fatalf("unexpected errors: %v", res.Errors)
				}
				if len(res.Cards) != tc.cards {
					t.Fatalf("found %d cards, want %d", len(res.Cards), tc.cards)
				}
				names := map[string]bool{}
				for ci, c := range res.Cards {
					sc := n.Cards[ci]
					if c.PCIAddress != sc.PCIAddress {
						t.Errorf("card %d address %q, want %q", ci, c.PCIAddress, sc.PCIAddress)
					}
					if c.InterfaceID != simnode.DefaultInterfaceID {
						t.Errorf("card %s interface %q, want canonical %q", c.PCIAddress, c.InterfaceID, simnode.DefaultInterfaceID)
					}
					if c.VendorID != "0x8086" || c.DeviceID != "0x09c4" || c.PortsNum != tc.ports {
						t.Errorf("card %s: vendor %s device %s ports_num %d", c.PCIAddress, c.VendorID, c.DeviceID, c.PortsNum)
					}
					if c.NUMANode != ci%2 || c.SocketID != ci%2 {
						t.Errorf("card %s: numa %d socket %d, want %d", c.PCIAddress, c.NUMANode, c.SocketID, ci%2)
					}
					if c.FME.Name != sc.FMEName || c.FME.Path != "/dev/"+sc.FMEName || c.FME.HostPath != filepath.Join(n.Root, "dev", sc.FMEName) {
						t.Errorf("card %s FME node %+v", c.PCIAddress, c.FME)
					}
					if !strings.HasPrefix(c.BitstreamID, "0x") {
						t.Errorf("card %s bitstream_id %q", c.PCIAddress, c.BitstreamID)
					}
					if len(c.Ports) != tc.ports {
						t.Fatalf("card %s has %d ports, want %d", c.PCIAddress, len(c.Ports), tc.ports)
					}
					for pi, p := range c.Ports {
						sp := sc.Ports[pi]
						if p.Node.Name != sp.Name || p.ID != sp.ID || p.PCIAddress != sp.PCIAddress {
							t.Errorf("port %d of %s: got %s id %d on %s, want %s id %d on %s", pi, c.PCIAddress, p.Node.Name, p.ID, p.PCIAddress, sp.Name, sp.ID, sp.PCIAddress)
						}
						if p.VirtualFunction != tc.vf {
							t.Errorf("port %s virtual function %v, want %v", p.Node.Name, p.VirtualFunction, tc.vf)
						}
						if p.Node.Minor != uint32(sp.Minor) {
							t.Errorf("port %s minor %d, want %d", p.Node.Name, p.Node.Minor, sp.Minor)
						}
						if len(p.AFUID) != 32 || strings.Contains(p.AFUID, "-") {
							t.Errorf("port %s AFU ID %q not canonical", p.Node.Name, p.AFUID)
						}
						if !n.RegularFiles && !p.Health.Healthy {
							t.Errorf("port %s unhealthy: %s", p.Node.Name, p.Health)
						}
						if names[p.DeviceName()] {
							t.Errorf("device name %s not unique", p.DeviceName())
						}
						names[p.DeviceName()] = true
					}
				}
			})
		}
	}
}

// TestDevCharLinks: the simulated node has udev's /dev/char/MAJOR:MINOR
// link for every FME and port node, and a hot-unplug removes the card's.
func TestDevCharLinks(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 2})
	res := scan(t, n.Root)
	check := func(node discovery.DevNode, want bool) {
		t.Helper()
		link := filepath.Join(n.Root, "dev/char", fmt.Sprintf("%d:%d", node.Major, node.Minor))
		if !want {
			if _, err := os.Lstat(link); !os.IsNotExist(err) {
				t.Errorf("%s still exists after the card was unplugged (%v)", link, err)
			}
			return
		}
		if got, err := filepath.EvalSymlinks(link); err != nil || got != node.HostPath {
			t.Errorf("%s resolves to %q (%v), want %s", link, got, err, node.HostPath)
		}
	}
	for _, c := range res.Cards {
		check(c.FME, true)
		for _, p := range c.Ports {
			check(p.Node, true)
		}
	}
	if err := n.RemoveCard(n.Cards[0]); err != nil {
		t.Fatal(err)
	}
	for i, c := range res.Cards {
		check(c.FME, i != 0)
		for _, p := range c.Ports {
			check(p.Node, i != 0)
		}
	}
}

func TestScanDeviceNameStable(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 2})
	a := scan(t, n.Root).Ports()
	b := scan(t, n.Root).Ports()
	if got := a[0].DeviceName(); got != "fpga-0000-01-00-0-p0" {
		t.Errorf("device name %q, want fpga-0000-01-00-0-p0", got)
	}
	for i := range a {
		if a[i].DeviceName() != b[i].DeviceName() {
			t.Errorf("name changed between scans: %s vs %s", a[i].DeviceName(), b[i].DeviceName())
		}
	}
}

func TestScanMissingInterfaceID(t *testing.T) {
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		for _, tc := range []struct {
			name    string
			corrupt func(*simnode.Node, *simnode.Card) error
		}{
			{"missing", func(n *simnode.Node, c *simnode.Card) error { return n.RemoveInterfaceID(c) }},
			{"empty", func(n *simnode.Node, c *simnode.Card) error { return n.SetInterfaceID(c, "") }},
		} {
			t.Run(string(drv)+"/"+tc.name, func(t *testing.T) {
				n := writeNode(t, simnode.Options{Driver: drv, Cards: 2, PortsPerCard: 1})
				if err := tc.corrupt(n, n.Cards[1]); err != nil {
					t.Fatal(err)
				}
				res := scan(t, n.Root)
				if len(res.Cards) != 1 || res.Cards[0].PCIAddress != n.Cards[0].PCIAddress {
					t.Fatalf("want only card %s, got %d cards", n.Cards[0].PCIAddress, len(res.Cards))
				}
				if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), n.Cards[1].PCIAddress) || !strings.Contains(res.Errors[0].Error(), "interface ID") {
					t.Fatalf("want one interface ID error naming %s, got %v", n.Cards[1].PCIAddress, res.Errors)
				}
			})
		}
	}
}

func TestScanAllF(t *testing.T) {
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		t.Run(string(drv), func(t *testing.T) {
			n := writeNode(t, simnode.Options{Driver: drv, Cards: 2, PortsPerCard: 1})
			if err := n.SetAFUID(n.Cards[0].Ports[0], discovery.AllF); err != nil {
				t.Fatal(err)
			}
			if err := n.SetInterfaceID(n.Cards[1], discovery.AllF); err != nil {
				t.Fatal(err)
			}
			res := scan(t, n.Root)
			if len(res.Cards) != 2 {
				t.Fatalf("want 2 cards, got %d (%v)", len(res.Cards), res.Errors)
			}
			for _, c := range res.Cards {
				p := c.Ports[0]
				if p.Health.Healthy {
					t.Errorf("port %s healthy, want unhealthy for all-f id", p.Node.Name)
				}
				if !strings.Contains(p.Health.String(), "all-f") {
					t.Errorf("port %s reason %q does not say all-f", p.Node.Name, p.Health)
				}
			}
		})
	}
}

// TestScanUpperCaseDashedIDs: IDs the kernel prints as upper-case dashed
// UUIDs come out canonical (lower case, no dashes).
func TestScanUpperCaseDashedIDs(t *testing.T) {
	const afu, iface = "0123456789ABCDEF0123456789ABCDEF", "FEDCBA9876543210FEDCBA9876543210"
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		t.Run(string(drv), func(t *testing.T) {
			n := writeNode(t, simnode.Options{Driver: drv, Cards: 1, PortsPerCard: 1, DashedIDs: true})
			if err := n.SetAFUID(n.Cards[0].Ports[0], afu); err != nil {
				t.Fatal(err)
			}
			if err := n.SetInterfaceID(n.Cards[0], iface); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(n.Cards[0].Ports[0].SysfsPath, "afu_id"))
			if err != nil || !strings.Contains(string(raw), "-") {
				t.Fatalf("simulated afu_id %q (%v) is not dashed", raw, err)
			}
			res := scan(t, n.Root)
			if len(res.Cards) != 1 {
				t.Fatalf("%d cards (%v)", len(res.Cards), res.Errors)
			}
			if c := res.Cards[0]; c.InterfaceID != strings.ToLower(iface) || c.Ports[0].AFUID != strings.ToLower(afu) {
				t.Errorf("interface %q afu %q, want %q and %q", c.InterfaceID, c.Ports[0].AFUID, strings.ToLower(iface), strings.ToLower(afu))
			}
		})
	}
}

func TestScanNoDriver(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/class"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := scan(t, root)
	if len(res.Drivers) != 0 || len(res.Cards) != 0 || len(res.Errors) != 0 {
		t.Fatalf("want no driver and nothing found, got %v %d cards %v", res.Drivers, len(res.Cards), res.Errors)
	}
}

func TestScanForcedDriverMissing(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1})
	_, err := (&discovery.Scanner{Root: n.Root, Select: discovery.Selection{Only: []discovery.KernelDriver{discovery.DriverOPAE}}}).Scan()
	if err == nil || !strings.Contains(err.Error(), "sys/class/fpga") {
		t.Fatalf("forcing opae on a dfl tree: want an error naming sys/class/fpga, got %v", err)
	}
}

func TestScanSkipsPRRegions(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 2})
	entries, err := os.ReadDir(filepath.Join(n.Root, "sys/class/fpga_region"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("simulated node has %d class regions, want 3 (card + 2 PR regions)", len(entries))
	}
	res := scan(t, n.Root)
	if len(res.Cards) != 1 || len(res.Ports()) != 2 || len(res.Errors) != 0 {
		t.Fatalf("want 1 card with 2 ports and no errors, got %d cards %d ports %v", len(res.Cards), len(res.Ports()), res.Errors)
	}
}

func TestScanDeviceNodeChecks(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverOPAE, Cards: 1, PortsPerCard: 2})
	if n.RegularFiles {
		t.Skip("this process cannot mknod, so the simulated /dev holds regular files")
	}
	if err := n.RemoveDevNode(n.Cards[0].Ports[1]); err != nil {
		t.Fatal(err)
	}
	res := scan(t, n.Root)
	ports := res.Ports()
	if !ports[0].Health.Healthy {
		t.Errorf("port 0 unhealthy: %s", ports[0].Health)
	}
	if ports[1].Health.Healthy || !strings.Contains(ports[1].Health.String(), "/dev/intel-fpga-port.1") {
		t.Errorf("port 1 health %q, want unhealthy naming its node", ports[1].Health)
	}
}

func TestRefresh(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1})
	s := &discovery.Scanner{Root: n.Root}
	res := scan(t, n.Root)
	if _, changed := s.Refresh(res); changed {
		t.Fatal("refresh of an unchanged tree reports a change")
	}
	const newAFU = "0123456789abcdef0123456789abcdef"
	if err := n.SetAFUID(n.Cards[1].Ports[0], newAFU); err != nil {
		t.Fatal(err)
	}
	next, changed := s.Refresh(res)
	if !changed {
		t.Fatal("refresh missed an AFU ID change")
	}
	if res.Started.IsZero() || !next.Started.After(res.Started) {
		t.Fatalf("the refresh began at %v, after the scan that began at %v: want a later Started", next.Started, res.Started)
	}
	for i, c := range next.Cards {
		if !c.ReadAt().Equal(next.Started) || !res.Cards[i].ReadAt().Equal(res.Started) {
			t.Fatalf("card %d: read at %v by the scan of %v, at %v by the refresh of %v; want each pass's", i, res.Cards[i].ReadAt(), res.Started, c.ReadAt(), next.Started)
		}
	}
	if got := next.Cards[1].Ports[0].AFUID; got != newAFU {
		t.Fatalf("refreshed AFU ID %q, want %q", got, newAFU)
	}
	if res.Cards[1].Ports[0].AFUID == newAFU {
		t.Fatal("refresh modified the earlier result in place")
	}
	if err := n.SetPortErrors(n.Cards[0].Ports[0], "0x4"); err != nil {
		t.Fatal(err)
	}
	next2, changed := s.Refresh(next)
	if !changed || next2.Cards[0].Ports[0].Health.Healthy {
		t.Fatalf("refresh missed port error bits: changed=%v health=%s", changed, next2.Cards[0].Ports[0].Health)
	}

	// A card whose interface ID can no longer be read keeps its last ID
	// but is unhealthy.
	ids, err := filepath.Glob(filepath.Join(n.Cards[1].FMEPath, "dfl-fme-region.*/fpga_region/region*/compat_id"))
	if err != nil || len(ids) != 1 {
		t.Fatalf("compat_id of card 1: %v %v", ids, err)
	}
	if err := os.Remove(ids[0]); err != nil {
		t.Fatal(err)
	}
	next3, changed := s.Refresh(next2)
	p := next3.Cards[1].Ports[0]
	if !changed || p.Health.Healthy || !strings.Contains(p.Health.String(), "interface ID") || next3.Cards[1].InterfaceID != next2.Cards[1].InterfaceID {
		t.Fatalf("refresh after compat_id vanished: changed=%v health=%s interface %q", changed, p.Health, next3.Cards[1].InterfaceID)
	}
}

// BenchmarkDiscover measures a full discovery: a new Scanner reads every
// attribute of every card, as the daemon does when it starts.
// BenchmarkRescan measures the daemon's rescan after a hot-plug uevent: a
// Scanner that has scanned the node lists every directory again and
// re-reads what can change.
func BenchmarkDiscover(b *testing.B) {
	benchmarkDiscover(b, func(root string) *discovery.Scanner {
		return &discovery.Scanner{Root: root}
	}, func(s *discovery.Scanner) *discovery.Scanner { return &discovery.Scanner{Root: s.Root} })
}

func BenchmarkRescan(b *testing.B) {
	benchmarkDiscover(b, func(root string) *discovery.Scanner {
		s := &discovery.Scanner{Root: root}
		if _, err := s.Scan(); err != nil {
			b.Fatal(err)
		}
		return s
	}, func(s *discovery.Scanner) *discovery.Scanner { return s })
}

// benchNode is a simulated node of a benchmark: name says what it holds
// ("dfl-64": 64 single-port DFL cards, "xrt-64": 64 Alveo cards, U250 and
// U55C by turns, "dfl-32+xrt-32" both).
type benchNode struct {
	name string
	opts simnode.Options
}

// benchNodes are the nodes of BenchmarkDiscover, BenchmarkRescan and
// BenchmarkRefresh64 (those of 64 cards).
func benchNodes(sizes ...int) []benchNode {
	alveo := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = []string{"u250", "u55c"}[i%2]
		}
		return out
	}
	var out []benchNode
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		for _, n := range sizes {
			out = append(out, benchNode{fmt.Sprintf("%s-%d", drv, n), simnode.Options{Driver: drv, Cards: n, PortsPerCard: 1}})
		}
	}
	for _, n := range sizes {
		out = append(out, benchNode{fmt.Sprintf("xrt-%d", n), simnode.Options{Alveo: alveo(n)}})
	}
	n := sizes[len(sizes)-1] / 2
	out = append(out, benchNode{fmt.Sprintf("dfl-%d+xrt-%d", n, n), simnode.Options{Driver: discovery.DriverDFL, Cards: n, PortsPerCard: 1, Alveo: alveo(n)}})
	return out
}

func benchmarkDiscover(b *testing.B, first func(root string) *discovery.Scanner, each func(*discovery.Scanner) *discovery.Scanner) {
	for _, bn := range benchNodes(8, 64) {
		b.Run(bn.name, func(b *testing.B) {
			n := writeNode(b, bn.opts)
			cards := len(n.Cards) + len(n.Alveo)
			s := first(n.Root)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := each(s).Scan()
				if err != nil || len(res.Cards) != cards || len(res.Errors) != 0 {
					b.Fatalf("scan: %v, %d cards, errors %v; want %d cards", err, len(res.Cards), res.Errors, cards)
				}
			}
		})
	}
}

// BenchmarkRefresh64 measures the periodic re-read of IDs and health of
// every card of a 64-card node.
func BenchmarkRefresh64(b *testing.B) {
	for _, bn := range benchNodes(64) {
		if strings.HasPrefix(bn.name, "opae") {
			continue
		}
		b.Run(bn.name, func(b *testing.B) {
			n := writeNode(b, bn.opts)
			s := &discovery.Scanner{Root: n.Root}
			res, err := s.Scan()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if next, _ := s.Refresh(res); len(next.Cards) != len(res.Cards) {
					b.Fatalf("refresh: %d cards, want %d", len(next.Cards), len(res.Cards))
				}
			}
		})
	}
}

func TestCardHealthErrorsAndTemperature(t *testing.T) {
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		t.Run(string(drv), func(t *testing.T) {
			n := writeNode(t, simnode.Options{Driver: drv, Cards: 3, PortsPerCard: 2})
			if err := n.SetFMEErrors(n.Cards[0], "0x10"); err != nil {
				t.Fatal(err)
			}
			if err := n.SetTemperature(n.Cards[1], 101000); err != nil {
				t.Fatal(err)
			}
			res := scan(t, n.Root)
			for ci, want := range []string{"0x10", "101°C", ""} {
				for _, p := range res.Cards[ci].Ports {
					if want == "" {
						if !p.Health.Healthy {
							t.Errorf("card %d port %s unhealthy: %s", ci, p.Node.Name, p.Health)
						}
						continue
					}
					if p.Health.Healthy || !strings.Contains(p.Health.String(), want) {
						t.Errorf("card %d port %s health %q, want unhealthy mentioning %s", ci, p.Node.Name, p.Health, want)
					}
				}
			}
			// Both clear; a refresh (no rescan) sees it.
			if err := n.SetFMEErrors(n.Cards[0], "0x0"); err != nil {
				t.Fatal(err)
			}
			if err := n.SetTemperature(n.Cards[1], 45000); err != nil {
				t.Fatal(err)
			}
			next, changed := (&discovery.Scanner{Root: n.Root}).Refresh(res)
			if !changed {
				t.Fatal("refresh missed the recovery")
			}
			for _, p := range next.Ports() {
				if !p.Health.Healthy {
					t.Errorf("port %s still unhealthy after recovery: %s", p.Node.Name, p.Health)
				}
			}
		})
	}
}

// TestRescanMatchesColdScan changes what can change without a hot-plug
// event and checks that a Scanner that has scanned before reports exactly
// what a new one does.
func TestRescanMatchesColdScan(t *testing.T) {
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		t.Run(string(drv), func(t *testing.T) {
			n := writeNode(t, simnode.Options{Driver: drv, Cards: 3, PortsPerCard: 2, VF: drv == discovery.DriverDFL})
			s := &discovery.Scanner{Root: n.Root}
			if _, err := s.Scan(); err != nil {
				t.Fatal(err)
			}
			c0, c1 := n.Cards[0], n.Cards[1]
			steps := []struct {
				name   string
				change func() error
			}{
				{"afu id", func() error { return n.SetAFUID(c0.Ports[1], simnode.SecondAFUID) }},
				{"port errors", func() error { return n.SetPortErrors(c1.Ports[0], "0x4") }},
				{"fme errors", func() error { return n.SetFMEErrors(c1, "0x1") }},
				{"temperature", func() error { return n.SetTemperature(c0, 120000) }},
				{"interface id", func() error { return n.SetInterfaceID(c0, simnode.SecondAFUID) }},
				{"device node", func() error { return n.RemoveDevNode(c1.Ports[1]) }},
				{"hot-plug", func() error { _, err := n.AddCard(); return err }},
				{"unplug", func() error { return n.RemoveCard(n.Cards[2]) }},
			}
			for _, step := range steps {
				if err := step.change(); err != nil {
					t.Fatalf("%s: %v", step.name, err)
				}
				warm, err := s.Scan()
				if err != nil {
					t.Fatalf("%s: rescan: %v", step.name, err)
				}
				cold := scan(t, n.Root)
				// When each began differs; what they read must not.
				if !discovery.SameResult(warm, cold) {
					t.Fatalf("after %s the rescan differs from a new scan:\nrescan %s\nnew    %s", step.name, describe(warm), describe(cold))
				}
			}
		})
	}
}

// TestRescanReadsRecreatedDevice checks the rescan's contract on fixed
// fields: they are read again when the device's directory is created anew
// (a new inode, as sysfs gives a device that was removed and added), and
// only then.
func TestRescanReadsRecreatedDevice(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1})
	s := &discovery.Scanner{Root: n.Root}
	if _, err := s.Scan(); err != nil {
		t.Fatal(err)
	}
	dir := n.Cards[0].Ports[0].SysfsPath
	// Rewriting a fixed attribute in place is not something the kernel
	// does; the rescan keeps what it knows.
	if err := os.WriteFile(filepath.Join(dir, "dev"), []byte("511:99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Cards[0].Ports[0].Node.Minor; got == 99 {
		t.Fatalf("rescan re-read the fixed dev attribute of an unchanged port")
	}
	// The same port removed and added again: a new directory.
	moved := filepath.Join(t.TempDir(), "old")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, os.DirFS(moved)); err != nil {
		t.Fatal(err)
	}
	// The kernel links the new number to its device.
	link := filepath.Join(n.Root, "sys/dev/char/511:99")
	rel, err := filepath.Rel(filepath.Dir(link), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rel, link); err != nil {
		t.Fatal(err)
	}
	res, err = s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Cards[0].Ports[0].Node.Minor; got != 99 {
		t.Fatalf("re-created port has minor %d, want 99 from its new dev attribute", got)
	}
}

// TestRescanFindsLateAttributes: a card whose driver had not yet created
// its hwmon directory and bitstream_id when it was first scanned (the FME
// driver adds them late in its probe) gets them, and its temperature
// health, from a later rescan.
func TestRescanFindsLateAttributes(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1})
	fme := n.Cards[0].FMEPath
	aside := t.TempDir()
	for _, name := range []string{"hwmon", "bitstream_id"} {
		if err := os.Rename(filepath.Join(fme, name), filepath.Join(aside, name)); err != nil {
			t.Fatal(err)
		}
	}
	s := &discovery.Scanner{Root: n.Root}
	res, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if res.Cards[0].BitstreamID != "" {
		t.Fatalf("bitstream ID %q without the attribute", res.Cards[0].BitstreamID)
	}
	for _, name := range []string{"hwmon", "bitstream_id"} {
		if err := os.Rename(filepath.Join(aside, name), filepath.Join(fme, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.SetTemperature(n.Cards[0], 120000); err != nil {
		t.Fatal(err)
	}
	res, err = s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	c := res.Cards[0]
	if c.BitstreamID == "" || c.Ports[0].Health.Healthy || !strings.Contains(c.Ports[0].Health.String(), "120°C") {
		t.Fatalf("rescan: bitstream ID %q, health %q; want the ID and the overheat", c.BitstreamID, c.Ports[0].Health)
	}
}

func describe(r *discovery.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "errors %v;", r.Errors)
	for _, c := range r.Cards {
		fmt.Fprintf(&b, " %+v", *c)
		for _, p := range c.Ports {
			fmt.Fprintf(&b, " %+v", *p)
		}
	}
	return b.String()
}
