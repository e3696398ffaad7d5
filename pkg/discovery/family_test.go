package discovery_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	_ "github.com/fpga-dra/fpga-dra-driver/pkg/family/xrt" // scans read XRT cards
)

// absentFamily is a family whose driver is never loaded: registering it
// changes no scan of the other tests.
type absentFamily struct{ name discovery.KernelDriver }

func (f absentFamily) Driver() discovery.KernelDriver { return f.name }
func (absentFamily) Present(string) bool              { return false }
func (absentFamily) Scan(context.Context, *discovery.Scanner, *discovery.Result) error {
	return nil
}
func (absentFamily) Refresh(c *discovery.Card, _ *discovery.Tracker) (*discovery.Card, bool) {
	return c, false
}
func (absentFamily) Models() map[string]string { return nil }
func (f absentFamily) ManagementName(path string) bool {
	return strings.HasPrefix(path, "/dev/"+string(f.name)+"-mgmt")
}

func TestRegister(t *testing.T) {
	for _, bad := range []discovery.KernelDriver{"", "auto", "none", "Bad_Name", "-x"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", bad)
				}
			}()
			discovery.Register(absentFamily{bad})
		}()
	}
	f := absentFamily{"absent"}
	discovery.Register(f)
	n := len(discovery.Families())
	discovery.Register(f)
	if got := len(discovery.Families()); got != n || discovery.FamilyOf("absent") != f {
		t.Errorf("registering %s again: %d families (want %d), FamilyOf %v", f.name, got, n, discovery.FamilyOf("absent"))
	}
	if sel, err := discovery.ParseSelection("dfl,absent"); err != nil || sel.String() != "dfl,absent" {
		t.Errorf("ParseSelection of a registered family: %v, %v", sel, err)
	}
	for path, want := range map[string]discovery.KernelDriver{
		"/dev/absent-mgmt0": "absent", "/dev/dfl-fme.0": discovery.DriverDFL, "/dev/intel-fpga-fme.1": discovery.DriverOPAE,
		"/dev/xclmgmt3": discovery.DriverXRT, "/dev/xfpga/flash.m15360": discovery.DriverXRT,
		"/dev/dfl-port.0": "", "/dev/xfpga/dma.qdma.u15361.0": "", "/dev/dri/renderD128": "",
	} {
		if got := discovery.ManagementFamily(path); got != want {
			t.Errorf("ManagementFamily(%s) = %q, want %q", path, got, want)
		}
	}
}
