package discovery_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// FuzzScanAttributes writes arbitrary contents into a card's sysfs
// attributes, as a broken or hostile kernel module could, and scans: the
// scan never panics, and whatever it accepts carries canonical IDs.
func FuzzScanAttributes(f *testing.F) {
	f.Add("511:0", "0", "d8424dc4a4a3c413f89e433683f9040b", "69528db6-eb31-577a-8c36-68f9faa081f6", "0x0", "1", "0")
	f.Add("x", "-1", "", "ffffffffffffffffffffffffffffffff", "0xzz", "999999999999", "\x00")
	f.Add("511:0:1", "00", "D8424DC4A4A3C413F89E433683F9040B\n\n", "\n", "", "", "-5")
	n, err := simnode.Write(f.TempDir(), simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1})
	if err != nil {
		f.Fatal(err)
	}
	c, p := n.Cards[0], n.Cards[0].Ports[0]
	compat, _ := filepath.Glob(filepath.Join(c.FMEPath, "dfl-fme-region.*", "fpga_region", "region*", "compat_id"))
	f.Fuzz(func(t *testing.T, dev, id, afu, ifID, errs, portsNum, numa string) {
		res, err := scanWith(t, n.Root, map[string]string{
			filepath.Join(p.SysfsPath, "dev"):              dev,
			filepath.Join(p.SysfsPath, "id"):               id,
			filepath.Join(p.SysfsPath, "afu_id"):           afu,
			compat[0]:                                      ifID,
			filepath.Join(p.SysfsPath, "errors", "errors"): errs,
			filepath.Join(c.FMEPath, "ports_num"):          portsNum,
			filepath.Join(c.PCIPath, "numa_node"):          numa,
		})
		if err != nil {
			return
		}
		for _, card := range res.Cards {
			if _, err := discovery.CanonicalID(card.InterfaceID); err != nil || card.InterfaceID == "" {
				t.Fatalf("accepted interface ID %q", card.InterfaceID)
			}
			for _, port := range card.Ports {
				if port.AFUID != "" {
					if got, err := discovery.CanonicalID(port.AFUID); err != nil || got != port.AFUID {
						t.Fatalf("accepted AFU ID %q", port.AFUID)
					}
				}
				_ = port.DeviceName()
			}
		}
	})
}

// scanWith writes each file's content and scans root, as a fuzz target
// of the scan does with its inputs.
func scanWith(t *testing.T, root string, files map[string]string) (*discovery.Result, error) {
	t.Helper()
	for path, v := range files {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return (&discovery.Scanner{Root: root}).Scan()
}
