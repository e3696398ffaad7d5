// Package testnode builds, for tests, a simulated FPGA node with what the
// daemon builds on a real one: the sysfs/devfs tree, a bitstream
// repository, a CDI spec directory, a checkpoint and the shared State over
// them, programming through the simulated programmer. Every package that
// tests code above discovery builds its node here.
package testnode

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	_ "github.com/fpga-dra/fpga-dra-driver/pkg/family/xrt" // scans read XRT cards
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

// Defaults of a Node.
const (
	// DriverName is the driver and CDI vendor name.
	DriverName = v1alpha1.DriverName
	// CDIClass is the CDI class of the claims' specs.
	CDIClass = "port"
	// NewAFU is an AFU no simulated port carries until it is programmed;
	// the repository holds it (accel.gbs) for the default interface.
	NewAFU = simnode.SampleAFUID
	// SecondAFU is another AFU the repository holds (second.gbs).
	SecondAFU = simnode.SecondAFUID
)

// Options shape a Node. The zero value is two DFL cards with one port
// each, a repository with NewAFU and SecondAFU, and a programmable node.
type Options struct {
	// Sim is the simulated node; Driver defaults to DFL, Cards to 2 and
	// PortsPerCard to 1.
	Sim simnode.Options
	// Restart reuses an earlier Node's tree and directories: a daemon
	// restart. The earlier Node's State must not be used any more.
	Restart *Node
	// Programmer defaults to a new SimProgrammer.
	Programmer *program.SimProgrammer
	// Backend, when set, is the State's programmer instead of Programmer
	// (e.g. one wrapping it).
	Backend program.Programmer
	// NotProgrammable is --programmable=false.
	NotProgrammable bool
	// PrepareWait and ReleaseWait tune the State (its defaults when zero).
	PrepareWait, ReleaseWait time.Duration
	// OnProgrammed, OnStep and OnRenumbered are the State's hooks.
	OnProgrammed func(state.Programming)
	OnStep       func(state.Step, types.UID)
	OnRenumbered func()
	// Registry is the State's puller of bitstreams from OCI registries.
	Registry *oci.Puller
	// NoRestore leaves State.Restore to the test.
	NoRestore bool
	// MemoryDisk keeps the plugin data directory, and so the checkpoint,
	// on a tmpfs, where a flush costs nothing: for tests about locks and
	// races rather than the disk.
	MemoryDisk bool
	// SimInMemory writes the simulated tree on a tmpfs, as sysfs and /dev
	// are on a node, so that the disk carries only what the driver writes
	// (benchmarks: writing back and then discarding the thousands of files
	// of the trees of earlier runs slowed the flushes they measure).
	SimInMemory bool
}

// Node is a simulated node and the daemon's state on it.
type Node struct {
	Sim     *simnode.Node
	Scanner *discovery.Scanner
	// DataDir is short (unix socket paths are limited to 108 bytes): the
	// plugin data directory, holding the checkpoint.
	DataDir, RepoDir, CDIDir string
	CDI                      *cdi.Writer
	Repository               *program.Repository
	Programmer               *program.SimProgrammer
	State                    *state.State
	// StateWarning is what state.New warned about (a damaged checkpoint).
	StateWarning error
	// Restored is what Restore reported (unless NoRestore).
	Restored state.RestoreReport
	// Ctx, the State's, ends when the test does, or at Stop (as a
	// SIGTERM ends the daemon's).
	Ctx  context.Context
	Stop context.CancelFunc
}

// New builds a node for t and a State on it, restored from its
// checkpoint.
func New(t testing.TB, o Options) *Node {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	n := &Node{Ctx: ctx, Stop: cancel, Programmer: o.Programmer}
	if n.Programmer == nil {
		n.Programmer = &program.SimProgrammer{}
	}
	if r := o.Restart; r != nil {
		n.Sim, n.DataDir, n.RepoDir, n.CDIDir = r.Sim, r.DataDir, r.RepoDir, r.CDIDir
	} else {
		n.write(t, o.Sim, o.SimInMemory, o.MemoryDisk)
	}
	n.Scanner = &discovery.Scanner{Root: n.Sim.Root}
	var err error
	if n.CDI, err = cdi.NewWriter(DriverName, CDIClass, n.CDIDir); err != nil {
		t.Fatal(err)
	}
	if n.Repository, err = program.NewRepository(ctx, n.RepoDir); err != nil {
		t.Fatal(err)
	}
	var backend program.Programmer = n.Programmer
	if o.Backend != nil {
		backend = o.Backend
	}
	n.State, n.StateWarning, err = state.New(ctx, state.Config{
		CheckpointPath: filepath.Join(n.DataDir, checkpoint.FileName),
		BootIDPath:     filepath.Join(n.Sim.Root, "proc/sys/kernel/random/boot_id"),
		CDI:            n.CDI,
		Repository:     n.Repository,
		Registry:       o.Registry,
		Programmer:     backend,
		Programmable:   !o.NotProgrammable,
		PrepareWait:    o.PrepareWait,
		ReleaseWait:    o.ReleaseWait,
		OnProgrammed:   o.OnProgrammed,
		OnStep:         o.OnStep,
		OnRenumbered:   o.OnRenumbered,
	})
	if err != nil {
		t.Fatalf("new state: %v", err)
	}
	if !o.NoRestore {
		if n.Restored, err = n.State.Restore(ctx, n.Devices(t)); err != nil {
			t.Fatalf("restore: %v", err)
		}
	}
	return n
}

// write lays out a new tree (on a tmpfs: inMemory) and directories (the
// data directory on a tmpfs: memoryDisk).
func (n *Node) write(t testing.TB, sim simnode.Options, inMemory, memoryDisk bool) {
	t.Helper()
	if sim.Driver == "" {
		sim.Driver = discovery.DriverDFL
	}
	if sim.Cards == 0 {
		sim.Cards = 2
	}
	if sim.PortsPerCard == 0 {
		sim.PortsPerCard = 1
	}
	var root string
	if inMemory {
		root = tmpfsDir(t, "sim")
	} else {
		root = t.TempDir()
	}
	var err error
	if n.Sim, err = simnode.Write(root, sim); err != nil {
		t.Fatal(err)
	}
	base := ""
	if memoryDisk {
		base = tmpfsDir(t, "data")
	} else if base, err = os.MkdirTemp("", "fdra"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	n.DataDir = filepath.Join(base, "data")
	n.RepoDir, n.CDIDir = t.TempDir(), tmpfsDir(t, "cdi")
	if err := os.MkdirAll(n.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	WriteBitstream(t, filepath.Join(n.RepoDir, "accel.gbs"), simnode.DefaultInterfaceID, NewAFU)
	WriteBitstream(t, filepath.Join(n.RepoDir, "second.gbs"), simnode.DefaultInterfaceID, SecondAFU)
}

// tmpfsDir is a directory on a tmpfs when the machine has one, as the CDI
// spec directory (/var/run/cdi), sysfs and /dev are on a node, else on the
// test's disk. name goes into the directory's name.
func tmpfsDir(t testing.TB, name string) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "fdra-"+name+"-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Devices scans the node.
func (n *Node) Devices(t testing.TB) *discovery.Result {
	t.Helper()
	res, err := n.Scanner.Scan()
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return res
}

// WriteBitstream writes a GBS for the simulated programmer at path: it
// carries afuID for interfaceID.
func WriteBitstream(t testing.TB, path, interfaceID, afuID string) {
	t.Helper()
	payload, err := program.SimPayload(afuID, 4096)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := program.WriteGBS(f, program.NewGBSMetadata(interfaceID, afuID, filepath.Base(path)), payload); err != nil {
		t.Fatal(err)
	}
}

// Stubborn is a backend that cannot be stopped once it started, like the
// kernel's PR ioctl: it programs through its SimProgrammer and ignores its
// context.
type Stubborn struct{ *program.SimProgrammer }

// Program implements program.Programmer.
func (s Stubborn) Program(_ context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	return s.SimProgrammer.Program(context.Background(), card, port, payload)
}
