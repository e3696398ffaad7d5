package state_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// TestBitstreamOfAnotherFamilyNamed: a config that names a GBS for an
// Alveo card is refused as a format mismatch (what the user must fix: an
// xclbin, not another interface), before anything is programmed.
func TestBitstreamOfAnotherFamilyNamed(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1, Alveo: []string{"u250"}}})
	devs := n.Devices(t)
	var alveo string
	for _, c := range devs.Cards {
		if c.Driver == discovery.DriverXRT {
			alveo = c.Ports[0].DeviceName()
		}
	}
	if alveo == "" {
		t.Fatal("no Alveo card discovered")
	}
	cfg := &v1alpha1.FpgaConfig{AFUID: testnode.NewAFU, Bitstream: "accel.gbs", Programming: v1alpha1.ProgrammingAlways}
	_, err := n.State.Prepare(context.Background(), holder("gbs-on-alveo"), request(alveo, cfg), devs)
	if !errors.Is(err, program.ErrFormatMismatch) || errors.Is(err, program.ErrInterfaceMismatch) {
		t.Fatalf("got %v, want a format mismatch alone", err)
	}
	if calls := n.Programmer.TotalCalls(); calls != 0 {
		t.Fatalf("the programmer was called %d times", calls)
	}
}
