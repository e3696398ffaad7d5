package draplugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// TestRenumberingIsNoDeviceFault: a PR refused because the cards were
// enumerated anew since discovery (nothing was written to the region) is
// no device fault: binding does not quarantine the region for it.
func TestRenumberingIsNoDeviceFault(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dev"), []byte("510:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	card := &discovery.Card{Driver: discovery.DriverDFL, PCIAddress: "0000:01:00.0", PortsNum: 1,
		FME: discovery.DevNode{Name: "dfl-fme.0", Path: "/dev/dfl-fme.0", HostPath: "/dev/null", Major: 1, Minor: 3, SysfsPath: dir}}
	port := &discovery.Port{ID: 0, PCIAddress: "0000:01:00.0", Node: discovery.DevNode{Name: "dfl-port.0"}}
	p, err := program.NewProgrammer(program.KindDFL)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Program(context.Background(), card, port, make([]byte, 8))
	if err == nil {
		t.Fatal("programmed")
	}
	if deviceFault(err) {
		t.Fatalf("renumbering quarantines the region as %s: %v", failureReason(err), err)
	}
}
