package xrt_test

import (
	"slices"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/family/xrt"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// TestRegistered: importing the package registers the family whole, after
// the Intel families: discovery scans it, program loads xclbins on its
// cards and reads them back.
func TestRegistered(t *testing.T) {
	var got []discovery.KernelDriver
	for _, f := range discovery.Families() {
		got = append(got, f.Driver())
	}
	if want := []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE, discovery.DriverXRT}; !slices.Equal(got, want) {
		t.Errorf("families %v, want %v", got, want)
	}
	f, ok := program.FamilyOf(discovery.DriverXRT).(xrt.Family)
	if !ok {
		t.Fatalf("program family of %q is %T, want xrt.Family", discovery.DriverXRT, program.FamilyOf(discovery.DriverXRT))
	}
	if !slices.Equal(f.Formats(), []program.Format{program.FormatXclbin}) {
		t.Errorf("formats %v, want [xclbin]", f.Formats())
	}
	var _ program.LoadedReader = f
	p, err := program.NewProgrammer(program.KindXRT)
	if err != nil || p.Name() != string(discovery.DriverXRT) {
		t.Errorf("NewProgrammer(%q) = %v, %v; want XRT's programmer", program.KindXRT, p, err)
	}
}
