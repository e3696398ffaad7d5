package state_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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

// alveoNode is a node with the simulated Alveo card model and its port,
// with an xclbin of xclbinUUID built for interfaceID in the repository
// (its path relative to the repository).
func alveoNode(t *testing.T, model, interfaceID, xclbinUUID string) (n *testnode.Node, devs *discovery.Result, port *discovery.Port, xclbin string) {
	t.Helper()
	n = testnode.New(t, testnode.Options{Sim: simnode.Options{Alveo: []string{model}}})
	paths, err := program.WriteSimXclbinRepository(n.RepoDir, interfaceID, simnode.AlveoModels[model].Platform, []string{xclbinUUID})
	if err != nil {
		t.Fatal(err)
	}
	if xclbin, err = filepath.Rel(n.RepoDir, paths[0]); err != nil {
		t.Fatal(err)
	}
	devs = n.Devices(t)
	for _, c := range devs.Cards {
		if c.Driver == discovery.DriverXRT {
			port = c.Ports[0]
		}
	}
	if port == nil {
		t.Fatal("no Alveo card discovered")
	}
	return n, devs, port, xclbin
}

// TestXclbinForTheShellsSecondInterface: an Alveo shell that lists two
// interface UUIDs gets an xclbin built for its second programmed, found in
// the repository by the AFU alone or with that interface named in the
// config; a config naming an interface the shell does not list is refused
// before anything is programmed.
func TestXclbinForTheShellsSecondInterface(t *testing.T) {
	const xclbin = "5eed0000000000000000000000000002"
	n, devs, port, _ := alveoNode(t, "u55c", simnode.U55CSecondInterfaceID, xclbin)
	ctx := context.Background()
	refused := &v1alpha1.FpgaConfig{AFUID: xclbin, InterfaceID: simnode.U250InterfaceID, Programming: v1alpha1.ProgrammingIfNeeded}
	if _, err := n.State.Prepare(ctx, holder("other-interface"), request(port.DeviceName(), refused), devs); !errors.Is(err, program.ErrInterfaceMismatch) {
		t.Fatalf("a config naming an interface the shell does not list: got %v, want an interface mismatch", err)
	}
	if calls := n.Programmer.TotalCalls(); calls != 0 {
		t.Fatalf("the programmer was called %d times", calls)
	}
	for i, cfg := range []*v1alpha1.FpgaConfig{
		{AFUID: xclbin, Programming: v1alpha1.ProgrammingAlways},
		{AFUID: xclbin, InterfaceID: simnode.U55CSecondInterfaceID, Programming: v1alpha1.ProgrammingAlways},
	} {
		h := holder(fmt.Sprintf("second-interface-%d", i))
		out, err := n.State.Prepare(ctx, h, request(port.DeviceName(), cfg), devs)
		if err != nil {
			t.Fatalf("config %+v: %v", cfg, err)
		}
		if len(out.Programmed) != 1 || out.Programmed[0].Err != nil || out.Programmed[0].AFUID != xclbin {
			t.Fatalf("config %+v programmed %+v, want %s loaded", cfg, out.Programmed, xclbin)
		}
		if id, err := port.ReadAFUID(); err != nil || id != xclbin {
			t.Fatalf("xclbinuuid after config %+v: %q, %v", cfg, id, err)
		}
		if err := n.State.Unprepare(ctx, h.UID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNamedXclbinForAnotherInterfaceThanTheConfigs: a config that names
// the shell's second interface gets a bitstream built for that interface,
// however it names the file: the repository's lookup by IDs finds only
// such a file and a registry's is refused otherwise, and so is one named
// by its path that is built for the shell's first interface. Nothing is
// programmed.
func TestNamedXclbinForAnotherInterfaceThanTheConfigs(t *testing.T) {
	const xclbin = "5eed0000000000000000000000000003"
	n, devs, port, rel := alveoNode(t, "u55c", simnode.U55CInterfaceID, xclbin)
	ctx := context.Background()
	// The lookup by IDs finds no build for the config's interface.
	byIDs := &v1alpha1.FpgaConfig{AFUID: xclbin, InterfaceID: simnode.U55CSecondInterfaceID, Programming: v1alpha1.ProgrammingAlways}
	if _, err := n.State.Prepare(ctx, holder("by-ids"), request(port.DeviceName(), byIDs), devs); !errors.Is(err, program.ErrNotFound) {
		t.Fatalf("lookup by IDs: got %v, want not found", err)
	}
	if err := n.State.Unprepare(ctx, holder("by-ids").UID); err != nil {
		t.Fatal(err)
	}
	byName := &v1alpha1.FpgaConfig{AFUID: xclbin, InterfaceID: simnode.U55CSecondInterfaceID, Bitstream: rel, Programming: v1alpha1.ProgrammingAlways}
	if _, err := n.State.Prepare(ctx, holder("by-name"), request(port.DeviceName(), byName), devs); !errors.Is(err, program.ErrInterfaceMismatch) {
		t.Fatalf("%s built for %s, named by a config for interface %s: got %v, want an interface mismatch", rel, simnode.U55CInterfaceID, simnode.U55CSecondInterfaceID, err)
	}
	if calls := n.Programmer.TotalCalls(); calls != 0 {
		t.Fatalf("the programmer was called %d times", calls)
	}
}
