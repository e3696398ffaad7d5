package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/internal/logging"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/version"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/flock"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

func newRunCommand() *cobra.Command {
	var f runFlags
	logs := logging.New()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node daemon (the default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := logs.Apply(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			ctx = klog.NewContext(ctx, klog.Background())
			returned := make(chan struct{})
			defer close(returned)
			go stopDeadline(ctx, cmd.Context(), stopLimit(f.shutdownWait), returned, os.Exit)
			err := run(ctx, f)
			if err != nil && ctx.Err() != nil {
				// Stopped while starting (e.g. waiting for an
				// unreachable API server): a clean shutdown.
				klog.FromContext(ctx).Info("Stopped before start-up completed", "cause", context.Cause(ctx), "interrupted", err)
				return nil
			}
			return err
		},
	}
	fs := cmd.Flags()
	f.addFlags(fs)
	flagenv.Twins(fs, runFlagTwins)
	f.oci.AddFlags(fs)
	flagenv.Twins(fs, oci.EnvTwins)
	logs.AddFlags(fs)
	return cmd
}

// run is the node daemon: it selects the mode, owns the node's state,
// serves the kubelet and the control socket until ctx ends, then stops
// (shutdown).
func run(ctx context.Context, f runFlags) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting fpga-dra-driver", "version", version.Version(), "commit", version.GitCommit())
	sel, err := f.complete()
	if err != nil {
		return err
	}
	client, err := f.kube.Clientset("fpga-dra-driver")
	if err != nil {
		return err
	}
	mode, err := selectMode(ctx, f, client)
	if err != nil {
		return err
	}
	scanner := &discovery.Scanner{Root: f.root, Select: sel, ReadTimeout: f.readTimeout}
	events, err := discovery.OpenUeventSource(f.ueventSource)
	if err != nil {
		logger.Error(err, "Uevents unavailable; hot-plug is seen through full rescans every refresh interval", "source", f.ueventSource)
		events = nil
	}
	metrics := drivermetrics.New()
	if f.metricsAddress != "" {
		if err := serveMetrics(ctx, f.metricsAddress, metrics); err != nil {
			return fmt.Errorf("--metrics-address: %w", err)
		}
	}
	// In DRA mode the plugin registers with the kubelet before it owns the
	// node's state: during a rolling update the kubelet sends its calls to
	// the newest instance, which holds them until the previous one stopped
	// and released the state lock. Nothing is published or programmed
	// before.
	var d *draplugin.Driver
	if mode != modeDevicePlugin {
		if d, err = startDRA(ctx, f, client, metrics, scanner, events); err != nil {
			return err
		}
	}
	stopDRA := func() {
		if d != nil {
			d.Stop()
		}
	}
	lock, err := lockState(ctx, f)
	if err != nil {
		stopDRA()
		return err
	}
	// Released once everything below stopped and no programming runs.
	defer lock.Close()
	st, err := restoreState(ctx, f, client, metrics, scanner)
	if err != nil {
		stopDRA()
		return err
	}
	srv, err := startServing(ctx, f, mode, client, st, scanner, events, d)
	if err != nil {
		return err
	}
	return serveControl(ctx, f, mode, st.state, srv)
}

// selectMode resolves --mode (asking the API server with --mode=auto) and
// creates the directories the mode serves in.
func selectMode(ctx context.Context, f runFlags, client kubernetes.Interface) (string, error) {
	// An API server that accepts the connection and never answers must not
	// hold the daemon forever: it fails and the kubelet restarts it.
	checkCtx, cancelCheck := context.WithTimeoutCause(ctx, modeCheckTimeout, fmt.Errorf("the API server did not answer within %s", modeCheckTimeout))
	mode, why, err := resolveMode(checkCtx, f.mode, client.Discovery())
	cancelCheck()
	if err != nil {
		return "", err
	}
	klog.FromContext(ctx).Info("Mode selected", "mode", mode, "reason", why)
	dirs := []string{f.pluginDir, f.registrarDir}
	if mode == modeDevicePlugin {
		dirs = []string{f.pluginDir, f.devicePluginsDir}
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return "", fmt.Errorf("create %s: %w", dir, err)
		}
	}
	return mode, nil
}

// stateLockFile, in the plugin directory, is held by the one process that
// owns the node's state (checkpoint, CDI specs, programming, slices).
const stateLockFile = "state.lock"

// lockState takes the node's state lock, waiting while the previous
// instance of the driver holds it (a rolling update). Closing the file
// releases it.
func lockState(ctx context.Context, f runFlags) (*os.File, error) {
	path := filepath.Join(f.pluginDir, stateLockFile)
	lock, err := flock.Acquire(ctx, path, func() {
		klog.FromContext(ctx).Info("Waiting for the previous instance of the driver on this node to stop (rolling update)", "lock", path)
	})
	if err != nil {
		return nil, fmt.Errorf("the node's driver state: %w", err)
	}
	return lock, nil
}

// restoreState opens the node's state and restores CDI specs and holds
// from its checkpoint, before the kubelet's calls are served.
func restoreState(ctx context.Context, f runFlags, client kubernetes.Interface, metrics *drivermetrics.Metrics, scanner *discovery.Scanner) (*nodeState, error) {
	st, err := newState(ctx, f, client, metrics)
	if err != nil {
		return nil, err
	}
	initial, err := scanner.ScanContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("discover devices: %w", err)
	}
	if _, err := st.state.Restore(ctx, initial); err != nil {
		klog.FromContext(ctx).Error(err, "Restoring prepared claims was incomplete")
	}
	return st, nil
}

// serving is what serves the node's devices in either mode.
type serving struct {
	devices func() *discovery.Result
	refresh func()
	// unregister stops serving the kubelet; stop also stops discovery
	// and publishing.
	unregister, stop func()
	// registered reports whether the kubelet registered the DRA plugin;
	// nil in device-plugin mode.
	registered func() bool
}

// startServing serves the node's devices in mode: the device-plugin
// endpoint, or the DRA plugin d given the node's state. Holds an earlier
// mode left are released once no container uses their ports.
func startServing(ctx context.Context, f runFlags, mode string, client kubernetes.Interface, st *nodeState, scanner *discovery.Scanner, events *discovery.UeventSource, d *draplugin.Driver) (*serving, error) {
	if mode == modeDevicePlugin {
		p, err := startDevicePlugin(ctx, f, client, st.state, scanner, events)
		if err != nil {
			return nil, err
		}
		// Holds of an earlier mode's resources: no Allocate supersedes them.
		go deviceplugin.ReleaseStaleHolds(ctx, st.state, f.podResourcesSocket, f.refreshInterval, p.Devices, p.Releasable, f.selfPod())
		return &serving{devices: p.Devices, refresh: p.RefreshDevices, unregister: p.Stop, stop: p.Stop}, nil
	}
	activateDRA(f, client, st, d)
	go deviceplugin.ReleaseStaleHolds(ctx, st.state, f.podResourcesSocket, f.refreshInterval, d.Devices, nil, f.selfPod())
	return &serving{
		devices: d.Devices, refresh: d.RefreshDevices, unregister: d.Unregister, stop: d.Stop,
		registered: func() bool {
			st := d.Helper().RegistrationStatus()
			return st != nil && st.PluginRegistered
		},
	}, nil
}

// serveControl serves the control socket until ctx ends, then stops the
// daemon (shutdown). A control socket that fails stops the daemon at once.
func serveControl(ctx context.Context, f runFlags, mode string, st *state.State, srv *serving) error {
	logger := klog.FromContext(ctx)
	if err := adminapi.ReleaseAdminHolds(ctx, st); err != nil {
		logger.Error(err, "Ports an interrupted admin programming held stay held")
	}
	ctl, err := adminapi.Listen(ctx, f.controlSocket, &adminapi.Node{
		State:      st,
		Devices:    srv.devices,
		MayProgram: deviceplugin.IsRegionHolder,
		Refresh:    srv.refresh,
		Mode:       mode,
		Registered: srv.registered,
	})
	if err != nil {
		srv.stop()
		return err
	}
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- ctl.Serve(ctx) }()
	logger.Info("Control socket ready", "socket", ctl.Path())
	select {
	case <-ctx.Done():
	case err := <-ctlDone:
		srv.stop()
		return err
	}
	// The control socket drains while the daemon stops: its requests
	// wait for the same programming.
	defer func() { <-ctlDone }()
	shutdown(ctx, f, st, srv)
	return nil
}

// startDRA starts the DRA kubelet plugin (the mode for clusters with DRA)
// in standby: registered, discovering, holding the kubelet's calls until
// activateDRA; and its liveness probe with --liveness-address.
func startDRA(ctx context.Context, f runFlags, client kubernetes.Interface, metrics *drivermetrics.Metrics, scanner *discovery.Scanner, events *discovery.UeventSource) (*draplugin.Driver, error) {
	d, err := draplugin.Start(ctx, draplugin.Config{
		DriverName:      f.driverName,
		NodeName:        f.nodeName,
		KubeClient:      client,
		RegistrarDir:    f.registrarDir,
		PluginDataDir:   f.pluginDir,
		Scanner:         scanner,
		Events:          events,
		RefreshInterval: f.refreshInterval,
		Programmable:    f.programmable,
		UnhealthyEffect: resourceapi.DeviceTaintEffect(f.unhealthyEffect),
		Metrics:         metrics,
		QuarantineTime:  f.quarantine,
		PodUID:          types.UID(f.podUID),
		DeviceMetadata:  f.deviceMetadata,
		CDIDir:          f.cdiDir,
		Standby:         true,
	})
	if err != nil {
		return nil, err
	}
	if f.livenessAddress != "" {
		if err := serveLiveness(ctx, f.livenessAddress, d); err != nil {
			d.Stop()
			return nil, fmt.Errorf("--liveness-address: %w", err)
		}
	}
	return d, nil
}

// activateDRA gives the plugin the node's state: it serves the kubelet's
// calls, publishes, and (with --binding-conditions on a programmable
// node) programs claims before their pods are bound.
func activateDRA(f runFlags, client kubernetes.Interface, st *nodeState, d *draplugin.Driver) {
	claims := &draplugin.Claims{
		DriverName: f.driverName, PoolName: f.nodeName, State: st.state, Recorder: st.recorder, Metrics: st.metrics,
		Client: client,
		Slices: deviceslice.Options{Programmable: f.programmable, Root: f.root},
	}
	var binder *draplugin.Binder
	if f.bindingConditions && f.programmable {
		binder = &draplugin.Binder{
			DriverName: f.driverName, NodeName: f.nodeName, Client: client,
			Claims: claims, Devices: d.Devices, Quarantine: d.Quarantine,
		}
	}
	st.driver.Store(d)
	d.Activate(claims, binder)
}
