package xrt_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func attr(as []discovery.Attribute, name string) any {
	for _, a := range as {
		if a.Name == name {
			return a.Value
		}
	}
	return nil
}

// TestScanAlveo: Alveo cards alone and beside Intel cards: one device per
// card (its user PF), the shell's IDs and names, the render and xfpga user
// nodes, the management node kept apart, and the vendor's legacy name.
func TestScanAlveo(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        simnode.Options
		drivers     []discovery.KernelDriver
		intel, want int
	}{
		{name: "alone", opts: simnode.Options{Alveo: []string{"u250", "u55c"}}, drivers: []discovery.KernelDriver{discovery.DriverXRT}, want: 2},
		{name: "beside DFL cards", opts: simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1, Alveo: []string{"u250", "u55c"}},
			drivers: []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverXRT}, intel: 2, want: 4},
		{name: "beside OPAE cards", opts: simnode.Options{Driver: discovery.DriverOPAE, Cards: 1, PortsPerCard: 2, Alveo: []string{"u55c"}},
			drivers: []discovery.KernelDriver{discovery.DriverOPAE, discovery.DriverXRT}, intel: 1, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := writeNode(t, tc.opts)
			res := scan(t, n.Root)
			if !slices.Equal(res.Drivers, tc.drivers) || len(res.Errors) != 0 || len(res.Cards) != tc.want {
				t.Fatalf("drivers %v, %d cards, errors %v; want %v and %d cards", res.Drivers, len(res.Cards), res.Errors, tc.drivers, tc.want)
			}
			for i, sc := range n.Alveo {
				c := res.Cards[tc.intel+i]
				if c.Driver != discovery.DriverXRT || c.PCIAddress != sc.UserAddress || len(c.Ports) != 1 {
					t.Fatalf("card %d: %+v, want the user PF %s with one device", i, c, sc.UserAddress)
				}
				p := c.Ports[0]
				if p.DeviceName() != "fpga-"+strings.NewReplacer(":", "-", ".", "-").Replace(sc.UserAddress)+"-p0" {
					t.Errorf("device name %s", p.DeviceName())
				}
				if !slices.Equal(c.InterfaceIDs, sc.Model.InterfaceIDs) || c.InterfaceID != sc.Model.InterfaceIDs[0] {
					t.Errorf("interface IDs %v, want %v", c.InterfaceIDs, sc.Model.InterfaceIDs)
				}
				if len(sc.Model.InterfaceIDs) > 1 && attr(c.Attributes, "interfaceID2") != sc.Model.InterfaceIDs[1] {
					t.Errorf("second interface ID not published: %v", c.Attributes)
				}
				if attr(c.Attributes, "platform") != sc.Model.Platform || attr(c.Attributes, "shellTimestamp") != sc.Model.Timestamp ||
					attr(c.Attributes, "logicUUID") != sc.Model.LogicID || attr(c.Attributes, "serial") == nil {
					t.Errorf("attributes %v", c.Attributes)
				}
				if !strings.HasPrefix(c.Model, "AMD Alveo") || c.NUMANode < 0 {
					t.Errorf("model %q, NUMA %d", c.Model, c.NUMANode)
				}
				if want := "amd.com/" + sc.Model.Platform + "-" + sc.Model.Timestamp; c.Legacy.Resource != want || c.Legacy.DeviceID != sc.UserAddress {
					t.Errorf("legacy %+v, want %s with device %s", c.Legacy, want, sc.UserAddress)
				}
				nodes := []string{}
				for _, node := range p.Nodes() {
					nodes = append(nodes, node.HostPath)
				}
				want := append([]string{sc.RenderPath}, sc.XfpgaPaths...)
				if !slices.Equal(nodes, want) {
					t.Errorf("user nodes %v, want %v", nodes, want)
				}
				mgmt := c.ManagementNodes()
				if len(mgmt) != 1 || mgmt[0].HostPath != sc.MgmtDevPath {
					t.Errorf("management nodes %+v, want %s", mgmt, sc.MgmtDevPath)
				}
				for _, node := range p.Nodes() {
					if strings.Contains(node.Path, "xclmgmt") || strings.Contains(node.Path, ".m") {
						t.Errorf("a management node among the user nodes: %s", node.Path)
					}
				}
				if !p.Health.Healthy || p.AFUID != "" {
					t.Errorf("health %v, AFU %q: want healthy, nothing loaded", p.Health, p.AFUID)
				}
			}
		})
	}
}

// TestRefreshAlveo: a loaded xclbin, the card's status and its nodes are
// re-read; each problem names its cause, and recovery clears it.
func TestRefreshAlveo(t *testing.T) {
	n := writeNode(t, simnode.Options{Alveo: []string{"u250"}})
	sc := n.Alveo[0]
	s := &discovery.Scanner{Root: n.Root}
	res, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetXclbin(sc, simnode.SampleXclbinUUID); err != nil {
		t.Fatal(err)
	}
	res, changed := s.Refresh(res)
	if !changed || res.Cards[0].Ports[0].AFUID != simnode.SampleXclbinUUID {
		t.Fatalf("after loading an xclbin: changed %v, afuID %q", changed, res.Cards[0].Ports[0].AFUID)
	}
	for _, tc := range []struct {
		name, cause  string
		break_, mend func() error
	}{
		{"not ready", "xrt-not-ready",
			func() error { return n.SetAlveoStatus(sc, "ready", "0x0") }, func() error { return n.SetAlveoStatus(sc, "ready", "0x1") }},
		{"offline", "offline",
			func() error { return n.SetAlveoStatus(sc, "dev_offline", "1") }, func() error { return n.SetAlveoStatus(sc, "dev_offline", "0") }},
		// xocl prints its flags in lower case; another build may not.
		{"not ready, in upper case", "xrt-not-ready",
			func() error { return n.SetAlveoStatus(sc, "ready", "0X0") }, func() error { return n.SetAlveoStatus(sc, "ready", "0X1") }},
		{"offline, in upper case", "offline",
			func() error { return n.SetAlveoStatus(sc, "dev_offline", "0X1") }, func() error { return n.SetAlveoStatus(sc, "dev_offline", "0X0") }},
		{"all-zero interface", "interface-id-all-zero",
			func() error { return n.SetAlveoStatus(sc, "interface_uuids", "00000000000000000000000000000000") },
			func() error { return n.SetAlveoStatus(sc, "interface_uuids", simnode.U250InterfaceID) }},
		{"all-f interface", "interface-id-all-f",
			func() error { return n.SetAlveoStatus(sc, "interface_uuids", discovery.AllF) },
			func() error { return n.SetAlveoStatus(sc, "interface_uuids", simnode.U250InterfaceID) }},
		{"no interface", "interface-id-missing",
			func() error { return n.SetAlveoStatus(sc, "interface_uuids", "") },
			func() error { return n.SetAlveoStatus(sc, "interface_uuids", simnode.U250InterfaceID) }},
		{"render node missing", "device-node-missing",
			func() error { return os.Rename(sc.RenderPath, sc.RenderPath+".away") }, func() error { return os.Rename(sc.RenderPath+".away", sc.RenderPath) }},
		{"management PF gone", "mgmt-gone",
			func() error { return os.Rename(sc.MgmtPath, sc.MgmtPath+".away") }, func() error { return os.Rename(sc.MgmtPath+".away", sc.MgmtPath) }},
		{"management PF offline", "mgmt-offline",
			func() error { return os.WriteFile(filepath.Join(sc.MgmtPath, "dev_offline"), []byte("1\n"), 0o644) },
			func() error { return os.WriteFile(filepath.Join(sc.MgmtPath, "dev_offline"), []byte("0\n"), 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.break_(); err != nil {
				t.Fatal(err)
			}
			broken, changed := s.Refresh(res)
			h := broken.Cards[0].Ports[0].Health
			if !changed || h.Healthy || h.Cause() != tc.cause {
				t.Fatalf("changed %v, health %+v; want cause %s", changed, h, tc.cause)
			}
			if strings.HasPrefix(tc.cause, "interface-id") && broken.Cards[0].InterfaceID != "" {
				t.Fatalf("an unusable interface ID %q is kept", broken.Cards[0].InterfaceID)
			}
			if err := tc.mend(); err != nil {
				t.Fatal(err)
			}
			mended, _ := s.Refresh(broken)
			if h := mended.Cards[0].Ports[0].Health; !h.Healthy || mended.Cards[0].InterfaceID != simnode.U250InterfaceID {
				t.Fatalf("after mending: %v, interface %q", h, mended.Cards[0].InterfaceID)
			}
		})
	}
}

// TestRescanAlveo: a rescan finds what a new scan finds; a shell ROM that
// shows late is read once it is there, and a card rebound to xocl is read
// afresh.
func TestRescanAlveo(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1, Alveo: []string{"u250", "u55c", "u250"}})
	late, away := filepath.Join(n.Alveo[0].UserPath, "rom.u.0"), filepath.Join(n.Alveo[0].UserPath, "not-yet")
	if err := os.Rename(late, away); err != nil {
		t.Fatal(err)
	}
	s := &discovery.Scanner{Root: n.Root}
	first, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if c := first.Cards[1]; attr(c.Attributes, "platform") != nil || c.Legacy.Resource != "" {
		t.Fatalf("card without its ROM: attributes %v, legacy %+v", c.Attributes, c.Legacy)
	}
	if err := os.Rename(away, late); err != nil {
		t.Fatal(err)
	}
	// Card 2 is rebound with a new shell: its ROM says so.
	sc := n.Alveo[2]
	if err := os.WriteFile(filepath.Join(sc.UserPath, "rom.u.0/VBNV"), []byte("xilinx_u250_gen3x16_xdma_shell_4_2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(n.Root, "sys/bus/pci/drivers/xocl", sc.UserAddress)
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	// A new link (a new inode, as sysfs gives a rebound device's link)
	// made before the old one goes, so the file system cannot reuse its
	// inode.
	if err := os.Symlink(target, link+".new"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(link+".new", link); err != nil {
		t.Fatal(err)
	}
	again, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	fresh := scan(t, n.Root)
	if diff := cmp.Diff(fresh.Cards, again.Cards, cmp.AllowUnexported(discovery.Card{}), cmpopts.IgnoreFields(discovery.Card{}, "readAt")); diff != "" {
		t.Fatalf("rescan differs from a new scan (-new +rescan):\n%s", diff)
	}
	if got := attr(again.Cards[1].Attributes, "platform"); got != n.Alveo[0].Model.Platform {
		t.Errorf("late ROM: platform %v, want %s", got, n.Alveo[0].Model.Platform)
	}
	if got := attr(again.Cards[3].Attributes, "platform"); got != "xilinx_u250_gen3x16_xdma_shell_4_2" {
		t.Errorf("rebound card: platform %v, want the new shell's", got)
	}
}

// TestRefreshKeepsTheEarlierResult: a refresh that sees new interface
// UUIDs gives a new card and leaves the earlier result as it was.
func TestRefreshKeepsTheEarlierResult(t *testing.T) {
	n := writeNode(t, simnode.Options{Alveo: []string{"u55c"}})
	s := &discovery.Scanner{Root: n.Root}
	res, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	const second = "0123456789abcdef0123456789abcdef"
	if err := n.SetAlveoStatus(n.Alveo[0], "interface_uuids", simnode.U55CInterfaceID+"\n"+second); err != nil {
		t.Fatal(err)
	}
	next, changed := s.Refresh(res)
	if got := attr(next.Cards[0].Attributes, "interfaceID2"); !changed || got != second {
		t.Fatalf("refresh: interfaceID2 %v, want %s", got, second)
	}
	if got := attr(res.Cards[0].Attributes, "interfaceID2"); got != simnode.U55CSecondInterfaceID {
		t.Errorf("the earlier result's interfaceID2 became %v, want %s", got, simnode.U55CSecondInterfaceID)
	}
}

// TestSelectFamilies: --kernel-driver picks, forces and excludes families.
func TestSelectFamilies(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1, Alveo: []string{"u250"}})
	for _, tc := range []struct {
		sel  string
		want []discovery.KernelDriver
	}{
		{"auto", []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverXRT}},
		{"auto,-xrt", []discovery.KernelDriver{discovery.DriverDFL}},
		{"xrt", []discovery.KernelDriver{discovery.DriverXRT}},
		{"dfl,xrt", []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverXRT}},
		{"none", nil},
	} {
		sel, err := discovery.ParseSelection(tc.sel)
		if err != nil {
			t.Fatalf("%s: %v", tc.sel, err)
		}
		res, err := (&discovery.Scanner{Root: n.Root, Select: sel}).Scan()
		if err != nil {
			t.Fatalf("%s: %v", tc.sel, err)
		}
		if !slices.Equal(res.Drivers, tc.want) {
			t.Errorf("%s: read %v, want %v", tc.sel, res.Drivers, tc.want)
		}
	}
	for _, bad := range []string{"xilinx", "-xrt", "auto,dfl", "dfl,-xrt"} {
		if _, err := discovery.ParseSelection(bad); err == nil {
			t.Errorf("selection %q accepted", bad)
		}
	}
}

// TestShellWithManyInterfaces: every interface UUID the shell lists is one
// its region accepts (Interfaces, Accepts), in the shell's order and once
// each; the first MaxInterfaceIDs of them are published as interfaceID and
// interfaceID2 up to interfaceID4, the ones beyond are not, and all-zero or
// all-f entries are never accepted.
func TestShellWithManyInterfaces(t *testing.T) {
	n := writeNode(t, simnode.Options{Alveo: []string{"u55c"}})
	ids := []string{
		simnode.U55CInterfaceID, simnode.U55CSecondInterfaceID,
		"33333333333333333333333333333333", "44444444444444444444444444444444",
		"55555555555555555555555555555555", simnode.U55CSecondInterfaceID,
		discovery.AllF,
	}
	if err := n.SetAlveoStatus(n.Alveo[0], "interface_uuids", strings.Join(ids, "\n")); err != nil {
		t.Fatal(err)
	}
	c := scan(t, n.Root).Cards[0]
	want := ids[:5]
	if got := c.Interfaces(); !slices.Equal(got, want) {
		t.Errorf("Interfaces() = %v, want %v", got, want)
	}
	for _, id := range want {
		if !c.Accepts(id) {
			t.Errorf("Accepts(%s) = false", id)
		}
	}
	for _, id := range []string{discovery.AllF, "00000000000000000000000000000000", "66666666666666666666666666666666"} {
		if c.Accepts(id) {
			t.Errorf("Accepts(%s) = true", id)
		}
	}
	if c.InterfaceID != ids[0] {
		t.Errorf("InterfaceID = %s, want %s", c.InterfaceID, ids[0])
	}
	for i := 2; i <= discovery.MaxInterfaceIDs; i++ {
		if got := attr(c.Attributes, fmt.Sprintf("interfaceID%d", i)); got != ids[i-1] {
			t.Errorf("interfaceID%d = %v, want %s", i, got, ids[i-1])
		}
	}
	beyond := fmt.Sprintf("interfaceID%d", discovery.MaxInterfaceIDs+1)
	if got := attr(c.Attributes, beyond); got != nil {
		t.Errorf("%s = %v published beyond interfaceID%d", beyond, got, discovery.MaxInterfaceIDs)
	}
}
