package draplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// TestRenumberingIsNoDeviceFault: a PR refused because the card changed
// between discovery and programming is no device fault that binding would
// quarantine the region for (nothing was written to it): its FME node now
// holds another device (the cards were enumerated anew), or it is gone
// with its sysfs directory (opening fails before the node is checked).
func TestRenumberingIsNoDeviceFault(t *testing.T) {
	renumbered := t.TempDir()
	if err := os.WriteFile(filepath.Join(renumbered, "dev"), []byte("510:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gone := t.TempDir()
	for name, fme := range map[string]discovery.DevNode{
		"renumbered": {Name: "dfl-fme.0", Path: "/dev/dfl-fme.0", HostPath: "/dev/null", Major: 1, Minor: 3, SysfsPath: renumbered},
		"gone":       {Name: "dfl-fme.0", Path: "/dev/dfl-fme.0", HostPath: filepath.Join(gone, "dev/dfl-fme.0"), Major: 510, Minor: 0, SysfsPath: filepath.Join(gone, "sys/dfl-fme.0")},
	} {
		card := &discovery.Card{Driver: discovery.DriverDFL, PCIAddress: "0000:01:00.0", PortsNum: 1, FME: fme}
		port := &discovery.Port{ID: 0, PCIAddress: "0000:01:00.0", Node: discovery.DevNode{Name: "dfl-port.0"}}
		p, err := program.NewProgrammer(program.KindDFL)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Program(context.Background(), card, port, make([]byte, 8))
		if err == nil {
			t.Fatalf("%s: programmed", name)
		}
		if deviceFault(err) {
			t.Errorf("%s FME: the region is quarantined as %s: %v", name, failureReason(err), err)
		}
	}
}

// TestJoinedReasonKeepsTheFault: a claim of two devices, one a real PR
// failure (quarantined), the other refused for renumbering: the claim's
// reason and the quarantine say ProgrammingFailed, not DevicesRenumbered.
func TestJoinedReasonKeepsTheFault(t *testing.T) {
	err := errors.Join(fmt.Errorf("dev a: %w", program.ErrProgramFailed), fmt.Errorf("dev b: %w", program.ErrDevicesChanged))
	if got := failureReason(err); got != "ProgrammingFailed" {
		t.Fatalf("reason %s for a claim one of whose regions failed PR (and is quarantined for it)", got)
	}
}
