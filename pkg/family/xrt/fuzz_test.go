package xrt_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// resourceName is an extended resource name as the kubelet accepts it.
var resourceName = regexp.MustCompile(`^amd\.com/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// FuzzScanAlveoAttributes writes arbitrary contents into an Alveo card's
// sysfs attributes, as a broken or hostile driver could, and scans: the
// scan never panics, and what it accepts carries canonical IDs, attribute
// strings that fit a ResourceSlice and a legacy name the kubelet accepts.
func FuzzScanAlveoAttributes(f *testing.F) {
	f.Add("15ed1a8e-f16f-c4f3-b6b2-fdb2f3e9a6a8\n3a4b5c6d7e8f40918a2b3c4d5e6f7a8b", "c0ffee00-c0ff-ee00-c0ff-ee00c0ffee00", "b3d56ba8c6014d33bd3b3f35ad00a6d5", "226:128", "xilinx_u250_gen3x16_xdma_shell_4_1", "1605146832", "0x1", "256")
	f.Add("", "", "", "x", "", "", "", "")
	f.Add("ffffffffffffffffffffffffffffffff", "00000000-0000-0000-0000-000000000000", "zz", "226:128:1", "a b/c", strings.Repeat("9", 70), "1", "-1")
	f.Add("15ed1a8ef16fc4f3b6b2fdb2f3e9a6a8", "", "", "226:128", "p", "1", "1", "0/../../dev/dri/renderD128")
	f.Add("\x00\n\n", "c0ffee00c0ffee00c0ffee00c0ffee00\nc0ffee00c0ffee00c0ffee00c0ffee01", "\n", "-1:0", strings.Repeat("x", 65), "t", "0x0", "../../etc")
	n, err := simnode.Write(f.TempDir(), simnode.Options{Alveo: []string{"u55c"}})
	if err != nil {
		f.Fatal(err)
	}
	c := n.Alveo[0]
	render, err := filepath.Glob(filepath.Join(c.UserPath, "drm", "renderD*", "dev"))
	if err != nil || len(render) != 1 {
		f.Fatalf("render dev file: %v %v", render, err)
	}
	f.Fuzz(func(t *testing.T, ifIDs, xclbin, logic, dev, vbnv, timestamp, ready, instance string) {
		res, err := scanWith(t, n.Root, map[string]string{
			filepath.Join(c.UserPath, "interface_uuids"):   ifIDs,
			filepath.Join(c.UserPath, "xclbinuuid"):        xclbin,
			filepath.Join(c.UserPath, "logic_uuids"):       logic,
			render[0]:                                      dev,
			filepath.Join(c.UserPath, "rom.u.0/VBNV"):      vbnv,
			filepath.Join(c.UserPath, "rom.u.0/timestamp"): timestamp,
			filepath.Join(c.UserPath, "ready"):             ready,
			filepath.Join(c.MgmtPath, "instance"):          instance,
		})
		if err != nil {
			return
		}
		for _, card := range res.Cards {
			for _, id := range append([]string{card.InterfaceID}, card.InterfaceIDs...) {
				if got, err := discovery.CanonicalID(id); id != "" && (err != nil || got != id) {
					t.Fatalf("accepted interface ID %q", id)
				}
			}
			for _, a := range card.Attributes {
				if s, ok := a.Value.(string); ok && (s == "" || len(s) > 64) {
					t.Fatalf("attribute %s = %q does not fit a ResourceSlice", a.Name, s)
				}
			}
			if r := card.Legacy.Resource; r != "" && !resourceName.MatchString(r) {
				t.Fatalf("legacy resource %q is no extended resource name", r)
			}
			for _, m := range card.ManagementNodes() {
				if !strings.HasPrefix(m.Path, "/dev/xclmgmt") || strings.Contains(m.Path, "..") {
					t.Fatalf("management node %q", m.Path)
				}
			}
			for _, port := range card.Ports {
				if port.AFUID != "" {
					if got, err := discovery.CanonicalID(port.AFUID); err != nil || got != port.AFUID {
						t.Fatalf("accepted xclbin UUID %q", port.AFUID)
					}
				}
				if port.Health.Healthy && card.InterfaceID == "" {
					t.Fatalf("healthy device %s without an interface ID", port.DeviceName())
				}
			}
		}
	})
}
