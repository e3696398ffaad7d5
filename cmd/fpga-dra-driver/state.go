package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

// nodeState is the shared node state and what it reports through.
type nodeState struct {
	state    *state.State
	recorder events.EventRecorder
	metrics  *drivermetrics.Metrics
	// driver is set once the DRA plugin runs; programming refreshes it.
	driver atomic.Pointer[draplugin.Driver]
}

// newState wires the bitstream repository, the programmer, the CDI writer
// and the checkpoint into one State.
func newState(ctx context.Context, f runFlags, client kubernetes.Interface, metrics *drivermetrics.Metrics) (*nodeState, error) {
	logger := klog.FromContext(ctx)
	writer, err := cdi.NewWriter(f.driverName, "port", f.cdiDir)
	if err != nil {
		return nil, fmt.Errorf("--cdi-dir: %w", err)
	}
	var repo *program.Repository
	var registry *oci.Puller
	registryUnavailable := "this node does not program (--programmable=false)"
	if f.programmable {
		if repo, err = program.NewRepository(ctx, f.bitstreamDir); err != nil {
			return nil, fmt.Errorf("--bitstream-dir: %w", err)
		}
		// A node that cannot keep a bitstream cache still serves claims
		// from its repository; claims that name a registry are told why.
		if registry, err = oci.NewPuller(ctx, f.oci); err != nil {
			registryUnavailable = fmt.Sprintf("its bitstream cache cannot be opened: %v", err)
			logger.Error(err, "Bitstreams from OCI registries are unavailable on this node", "cacheDir", f.oci.CacheDir)
		}
	}
	opts := []program.ProgrammerOption{program.WithXRT(program.XRTConfig{ToolDir: f.xrtToolDir, HostRoot: f.xrtHostRoot, Timeout: f.xrtTimeout})}
	if f.programmer == program.KindSim {
		delays, err := program.ParseSimDelays(f.simProgramDelays)
		if err != nil {
			return nil, fmt.Errorf("--sim-program-delays: %w", err)
		}
		opts = append(opts, program.WithSimulator(&program.SimProgrammer{Delay: f.simProgramDelay, Delays: delays, FailDevices: f.simProgramFail}))
	}
	prog, err := program.NewProgrammer(f.programmer, opts...)
	if err != nil {
		return nil, fmt.Errorf("--programmer %s (--xrt-tool-dir, --xrt-host-root, --xrt-timeout): %w", f.programmer, err)
	}
	bootID := f.bootIDFile
	if bootID == "" {
		bootID = filepath.Join(f.root, "proc/sys/kernel/random/boot_id")
		if _, err := os.Stat(bootID); err != nil {
			bootID = "/proc/sys/kernel/random/boot_id"
		}
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	ns := &nodeState{recorder: broadcaster.NewRecorder(scheme.Scheme, "fpga-dra-driver"), metrics: metrics}
	st, warning, err := state.New(ctx, state.Config{
		CheckpointPath:      filepath.Join(f.pluginDir, checkpoint.FileName),
		BootIDPath:          bootID,
		CDI:                 writer,
		Repository:          repo,
		Registry:            registry,
		RegistryUnavailable: registryUnavailable,
		Programmer:          prog,
		Programmable:        f.programmable,
		PrepareWait:         f.prepareWait,
		OnProgrammed: func(p state.Programming) {
			ns.metrics.ObserveProgramming(p.Err, p.Duration)
			if d := ns.driver.Load(); d != nil {
				d.RefreshDevices()
			}
		},
		OnRenumbered: func() {
			if d := ns.driver.Load(); d != nil {
				d.Republish()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if warning != nil {
		if !errors.Is(warning, checkpoint.ErrCorrupt) {
			return nil, warning
		}
		logger.Error(warning, "CHECKPOINT CORRUPT: prepared claims may be missing; the file was kept aside for inspection")
	}
	ns.state = st
	logger.Info("Node state ready", "bootID", st.BootID(), "programmer", prog.Name(), "bitstreamDir", f.bitstreamDir, "cdiDir", f.cdiDir)
	return ns, nil
}
