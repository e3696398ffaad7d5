package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/internal/kubeclient"
	"github.com/fpga-dra/fpga-dra-driver/internal/logging"
	"github.com/fpga-dra/fpga-dra-driver/internal/version"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/flock"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

type runFlags struct {
	kube                             kubeclient.Flags
	nodeName, driverName             string
	root, kernelDriver               string
	registrarDir, pluginDir          string
	cdiDir, bitstreamDir, bootIDFile string
	programmer                       string
	simProgramDelay                  time.Duration
	simProgramDelays                 string
	simProgramFail                   []string
	// The XRT programmer (Alveo cards).
	xrtToolDir, xrtHostRoot      string
	xrtTimeout                   time.Duration
	prepareWait                  time.Duration
	refreshInterval, readTimeout time.Duration
	programmable                 bool
	// Mode selection and the legacy device-plugin endpoint.
	mode, devicePluginMode           string
	devicePluginsDir, resourceDomain string
	controlSocket, hookPath          string
	podResourcesSocket               string
	cdi                              bool
	// Operations.
	ueventSource, metricsAddress, livenessAddress, unhealthyEffect string
	// Bitstreams from OCI registries.
	oci oci.PullerOptions
	// Newer DRA features: programming before binding, rolling updates,
	// device metadata.
	bindingConditions bool
	quarantine        time.Duration
	podUID            string
	podName           string
	podNamespace      string
	deviceMetadata    bool
	shutdownWait      time.Duration
}

// programmerUsage describes the programmer kinds (program.ProgrammerKinds)
// for the --programmer flags.
const programmerUsage = "programming backend: auto (each card's family's: dfl, opae or xrt), dfl, opae, xrt (xclbins on Alveo cards, through the host's XRT tool) or sim (a simulated node)"

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
	f.kube.AddFlags(fs, 50, 100)
	fs.StringVar(&f.nodeName, "node-name", "", "name of this node (required)")
	fs.StringVar(&f.driverName, "driver-name", v1alpha1.DriverName, "DRA driver name, also the attribute domain")
	fs.StringVar(&f.root, "root", "/", "directory holding sys/ and dev/; a simulated node's --dir")
	fs.StringVar(&f.kernelDriver, "kernel-driver", "auto", "card families to read: auto (every one whose kernel driver is loaded), none, a list (dfl,xrt) or auto with exclusions (auto,-xrt); families: dfl, opae, xrt")
	fs.StringVar(&f.registrarDir, "registrar-dir", "/var/lib/kubelet/plugins_registry", "kubelet plugin registration directory")
	fs.StringVar(&f.pluginDir, "plugin-dir", "", "plugin data directory (sockets, checkpoint); "+kubeletPluginsDir+"/<driver-name> when empty")
	fs.StringVar(&f.cdiDir, "cdi-dir", "/var/run/cdi", "directory the container runtime reads CDI specs from")
	fs.StringVar(&f.bitstreamDir, "bitstream-dir", program.DefaultRepositoryDir, "bitstream repository; claims name files only inside it")
	fs.StringVar(&f.programmer, "programmer", program.KindAuto, programmerUsage)
	fs.DurationVar(&f.simProgramDelay, "sim-program-delay", 2*time.Second, "how long the sim programmer takes per region")
	fs.StringVar(&f.simProgramDelays, "sim-program-delays", "", "the sim programmer's delay per AFU ID, overriding --sim-program-delay: AFUID=DURATION,...")
	fs.StringSliceVar(&f.simProgramFail, "sim-program-fail", nil, "devices (DRA device names) on which the sim programmer's every programming fails")
	fs.StringVar(&f.xrtToolDir, "xrt-tool-dir", program.DefaultXRTToolDir, "the host's XRT bin directory, holding xrt-smi (or, before XRT 2.17, xbutil), which loads xclbins on Alveo cards; a path on the host, below --xrt-host-root when that is set")
	fs.StringVar(&f.xrtHostRoot, "xrt-host-root", "", "where the host's / is mounted when the daemon runs in a container (e.g. /host; its proc must be the host's /proc): the XRT tool then runs chrooted there; empty runs it directly")
	fs.DurationVar(&f.xrtTimeout, "xrt-timeout", program.DefaultXRTTimeout, "how long one xclbin load through the XRT tool may take before the tool and every process it started are killed")
	fs.DurationVar(&f.prepareWait, "prepare-wait", 20*time.Second, "how long one prepare call waits for programming before it reports \"in progress\" (the kubelet gives a call 45s)")
	fs.StringVar(&f.bootIDFile, "boot-id-file", "", "boot ID file; <root>/proc/sys/kernel/random/boot_id when it exists, else /proc/sys/kernel/random/boot_id")
	fs.DurationVar(&f.refreshInterval, "refresh-interval", 30*time.Second, "how often IDs, error registers and device nodes are re-read")
	fs.DurationVar(&f.readTimeout, "sysfs-read-timeout", discovery.DefaultReadTimeout, "how long the sysfs reads of one card may take in one pass; a card whose read hangs longer is reported unhealthy and not read again until that read returns")
	fs.BoolVar(&f.programmable, "programmable", true, "allow partial reconfiguration on this node")
	fs.StringVar(&f.mode, "mode", modeAuto, "API to serve: auto (DRA when the API server serves resource.k8s.io, else device-plugin), dra or device-plugin")
	fs.StringVar(&f.devicePluginMode, "device-plugin-mode", string(deviceplugin.ModeAF), "device-plugin resources: af (one per loaded function, a device per port) or region (one per interface ID, a device per card, programmed for the container); the node annotation fpga.dra.dev/device-plugin-mode (or fpga.intel.com/device-plugin-mode) overrides it")
	fs.StringVar(&f.devicePluginsDir, "device-plugins-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory (kubelet.sock)")
	fs.StringVar(&f.resourceDomain, "resource-domain", deviceplugin.DefaultDomain, "domain of the device-plugin resource names; fpga.intel.com keeps the Intel FPGA device plugin's names")
	fs.BoolVar(&f.cdi, "cdi", true, "device-plugin mode: also hand out CDI devices (and, in region mode, the programming hook) in Allocate")
	fs.StringVar(&f.controlSocket, "control-socket", "", "local control socket (programming hook, admin); <plugin-dir>/control.sock when empty")
	fs.StringVar(&f.podResourcesSocket, "pod-resources-socket", deviceplugin.DefaultPodResourcesSocket, "the kubelet's pod-resources socket: in DRA mode, device-plugin holds left from an earlier mode are released once it lists no container with their ports")
	fs.StringVar(&f.hookPath, "hook-path", "", "this program's path on the host, run by the container runtime as the region programming hook; this process's executable when empty")
	fs.StringVar(&f.ueventSource, "uevent-source", "netlink", "where hot-plug uevents come from: netlink (the kernel), unix:PATH (a datagram socket a simulated node sends to) or none (full rescans every refresh interval)")
	fs.StringVar(&f.metricsAddress, "metrics-address", "", "serve Prometheus /metrics on this address (e.g. :9400); off when empty")
	fs.StringVar(&f.livenessAddress, "liveness-address", "", "serve the gRPC liveness probe (grpc.health.v1) on this address (e.g. :51515); off when empty")
	fs.StringVar(&f.unhealthyEffect, "unhealthy-taint-effect", string(resourceapi.DeviceTaintEffectNoSchedule), "effect of the taint on an unhealthy device: NoSchedule, or NoExecute to also evict its pods")
	fs.BoolVar(&f.bindingConditions, "binding-conditions", true, "program claims before their pods are bound (KEP-5007 binding conditions; needs the ResourceClaim router of fpga-dra-controller): a pod is bound only once its regions carry their functions, programming is not limited by the kubelet's 45s, and a failed programming sends the claim to another device; off, or when the API server drops binding conditions, claims are programmed at prepare")
	fs.DurationVar(&f.quarantine, "programming-failure-quarantine", draplugin.DefaultQuarantineTime, "how long a device whose programming failed before binding through a fault of the device (not of the claim's bitstream) is kept out of new allocations (a NoSchedule taint)")
	fs.StringVar(&f.podName, "pod-name", "", "this pod's name (downward API metadata.name): a pod-resources list of the kubelet without this pod has not been synced and releases no device-plugin hold")
	fs.StringVar(&f.podNamespace, "pod-namespace", "", "this pod's namespace (downward API metadata.namespace), with --pod-name")
	fs.StringVar(&f.podUID, "pod-uid", "", "this pod's UID (downward API metadata.uid): the next version's pod then serves the kubelet beside this one during a rolling update, taking over the node's state when this one stops")
	fs.BoolVar(&f.deviceMetadata, "device-metadata", true, "give each container a file with its devices' attributes (KEP-5304) under /var/run/kubernetes.io/dra-device-attributes")
	fs.DurationVar(&f.shutdownWait, "shutdown-wait", 5*time.Minute, "how long stopping waits for programming in flight (it cannot be stopped part way); then programming is cancelled and waited for 5 s more, and the process exits at the latest 10 s after this wait: keep the pod's terminationGracePeriodSeconds above this wait plus 10 s")
	flagenv.Twins(fs, map[string]string{
		"shutdown-wait":                  "SHUTDOWN_WAIT",
		"binding-conditions":             "BINDING_CONDITIONS",
		"programming-failure-quarantine": "PROGRAMMING_FAILURE_QUARANTINE",
		"pod-uid":                        "POD_UID",
		"pod-name":                       "POD_NAME",
		"pod-namespace":                  "POD_NAMESPACE",
		"device-metadata":                "DEVICE_METADATA",
		"kubeconfig":                     "KUBECONFIG",
		"node-name":                      "NODE_NAME",
		"driver-name":                    "DRIVER_NAME",
		"root":                           "FPGA_ROOT",
		"kernel-driver":                  "KERNEL_DRIVER",
		"registrar-dir":                  "REGISTRAR_DIR",
		"plugin-dir":                     "PLUGIN_DIR",
		"cdi-dir":                        "CDI_DIR",
		"bitstream-dir":                  "BITSTREAM_DIR",
		"programmer":                     "PROGRAMMER",
		"boot-id-file":                   "BOOT_ID_FILE",
		"programmable":                   "PROGRAMMABLE",
		"mode":                           "MODE",
		"device-plugin-mode":             "DEVICE_PLUGIN_MODE",
		"device-plugins-dir":             "DEVICE_PLUGINS_DIR",
		"resource-domain":                "RESOURCE_DOMAIN",
		"cdi":                            "CDI",
		"control-socket":                 "CONTROL_SOCKET",
		"pod-resources-socket":           "POD_RESOURCES_SOCKET",
		"hook-path":                      "HOOK_PATH",
		"uevent-source":                  "UEVENT_SOURCE",
		"metrics-address":                "METRICS_ADDRESS",
		"liveness-address":               "LIVENESS_ADDRESS",
		"unhealthy-taint-effect":         "UNHEALTHY_TAINT_EFFECT",
		"sim-program-delay":              "SIM_PROGRAM_DELAY",
		"sim-program-delays":             "SIM_PROGRAM_DELAYS",
		"sim-program-fail":               "SIM_PROGRAM_FAIL",
		"xrt-tool-dir":                   "XRT_TOOL_DIR",
		"xrt-host-root":                  "XRT_HOST_ROOT",
		"xrt-timeout":                    "XRT_TIMEOUT",
		"prepare-wait":                   "PREPARE_WAIT",
		"refresh-interval":               "REFRESH_INTERVAL",
		"sysfs-read-timeout":             "SYSFS_READ_TIMEOUT",
		"kube-api-qps":                   "KUBE_API_QPS",
		"kube-api-burst":                 "KUBE_API_BURST",
	})
	f.oci.AddFlags(fs)
	flagenv.Twins(fs, oci.EnvTwins)
	logs.AddFlags(fs)
	return cmd
}

func run(ctx context.Context, f runFlags) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting fpga-dra-driver", "version", version.Version(), "commit", version.GitCommit())
	if f.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required: the node this daemon runs on")
	}
	sel, err := discovery.ParseSelection(f.kernelDriver)
	if err != nil {
		return fmt.Errorf("--kernel-driver: %w", err)
	}
	if f.pluginDir == "" {
		f.pluginDir = defaultPluginDir(f.driverName)
	}
	if f.controlSocket == "" {
		f.controlSocket = defaultControlSocket(f.pluginDir)
	}
	client, err := f.kube.Clientset("fpga-dra-driver")
	if err != nil {
		return err
	}
	// An API server that accepts the connection and never answers must not
	// hold the daemon forever: it fails and the kubelet restarts it.
	checkCtx, cancelCheck := context.WithTimeoutCause(ctx, modeCheckTimeout, fmt.Errorf("the API server did not answer within %s", modeCheckTimeout))
	mode, why, err := resolveMode(checkCtx, f.mode, client.Discovery())
	cancelCheck()
	if err != nil {
		return err
	}
	logger.Info("Mode selected", "mode", mode, "reason", why)
	dirs := []string{f.pluginDir, f.registrarDir}
	if mode == modeDevicePlugin {
		dirs = []string{f.pluginDir, f.devicePluginsDir}
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	scanner := &discovery.Scanner{Root: f.root, Select: sel, ReadTimeout: f.readTimeout}
	switch resourceapi.DeviceTaintEffect(f.unhealthyEffect) {
	case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute:
	default:
		return fmt.Errorf("--unhealthy-taint-effect %q: use NoSchedule or NoExecute", f.unhealthyEffect)
	}
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
		if f.livenessAddress != "" {
			if err := serveLiveness(ctx, f.livenessAddress, d); err != nil {
				d.Stop()
				return fmt.Errorf("--liveness-address: %w", err)
			}
		}
	}
	stopDRA := func() {
		if d != nil {
			d.Stop()
		}
	}
	lock, err := flock.Acquire(ctx, filepath.Join(f.pluginDir, stateLockFile), func() {
		logger.Info("Waiting for the previous instance of the driver on this node to stop (rolling update)", "lock", filepath.Join(f.pluginDir, stateLockFile))
	})
	if err != nil {
		stopDRA()
		return fmt.Errorf("the node's driver state: %w", err)
	}
	// Released once everything below stopped and no programming runs.
	defer lock.Close()
	st, err := newState(ctx, f, client, metrics)
	if err != nil {
		stopDRA()
		return err
	}
	// Restore CDI specs and holds before the kubelet's calls are served.
	initial, err := scanner.ScanContext(ctx)
	if err != nil {
		stopDRA()
		return fmt.Errorf("discover devices: %w", err)
	}
	if _, err := st.state.Restore(ctx, initial); err != nil {
		logger.Error(err, "Restoring prepared claims was incomplete")
	}
	var devices func() *discovery.Result
	// unregister stops serving the kubelet; stop also stops discovery
	// and publishing.
	var refresh, unregister, stop func()
	var registered func() bool
	if mode == modeDevicePlugin {
		p, err := startDevicePlugin(ctx, f, client, st.state, scanner, events)
		if err != nil {
			return err
		}
		devices, refresh, stop = p.Devices, p.RefreshDevices, p.Stop
		unregister = stop
		// Holds of an earlier mode's resources: no Allocate supersedes them.
		go deviceplugin.ReleaseStaleHolds(ctx, st.state, f.podResourcesSocket, f.refreshInterval, p.Devices, p.Releasable, f.selfPod())
	} else {
		activateDRA(f, client, st, d)
		devices, refresh, unregister, stop = d.Devices, d.RefreshDevices, d.Unregister, d.Stop
		registered = func() bool {
			st := d.Helper().RegistrationStatus()
			return st != nil && st.PluginRegistered
		}
		go deviceplugin.ReleaseStaleHolds(ctx, st.state, f.podResourcesSocket, f.refreshInterval, d.Devices, nil, f.selfPod())
	}
	if err := adminapi.ReleaseAdminHolds(ctx, st.state); err != nil {
		logger.Error(err, "Ports an interrupted admin programming held stay held")
	}
	ctl, err := adminapi.Listen(ctx, f.controlSocket, &adminapi.Node{
		State:      st.state,
		Devices:    devices,
		MayProgram: deviceplugin.IsRegionHolder,
		Refresh:    refresh,
		Mode:       mode,
		Registered: registered,
	})
	if err != nil {
		stop()
		return err
	}
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- ctl.Serve(ctx) }()
	logger.Info("Control socket ready", "socket", ctl.Path())
	select {
	case <-ctx.Done():
	case err := <-ctlDone:
		stop()
		return err
	}
	logger.Info("Shutting down", "cause", context.Cause(ctx))
	// --shutdown-wait counts from here. The control socket drains
	// meanwhile: its requests wait for the same programming.
	idle, cancel := context.WithTimeoutCause(context.WithoutCancel(ctx), f.shutdownWait, fmt.Errorf("--shutdown-wait %s passed", f.shutdownWait))
	defer cancel()
	defer func() { <-ctlDone }()
	unregister()
	// A call the servers were still handling (an Allocate, a kubelet's
	// prepare, a control request, the stale-hold releaser's release)
	// that has not reached the State yet is refused from here on; the
	// ones that have are waited for below.
	st.state.Drain()
	// Discovery and the published slices stay current while programming
	// ends, but not past the kubelet's wipe of the driver's slices (when
	// no other instance registered): a slice put back after it would
	// outlive the driver.
	publishing := time.AfterFunc(min(f.shutdownWait, kubeletWipeDelay-wipeMargin), stop)
	defer func() {
		publishing.Stop()
		stop()
	}()
	if err := st.state.WaitIdle(idle); err != nil {
		logger.Error(err, "Stopping programming in flight; the next instance programs its region again")
		st.state.CancelJobs(err)
		stopped, cancel := context.WithTimeoutCause(context.WithoutCancel(ctx), jobStopWait, fmt.Errorf("programming did not stop within %s of its cancellation", jobStopWait))
		defer cancel()
		if err := st.state.WaitIdle(stopped); err != nil {
			logger.Error(err, "Stopping while a region is being programmed; the next instance finds it interrupted")
		}
	}
	return nil
}

// jobStopWait bounds how long a stopping daemon waits for programming it
// cancelled (after --shutdown-wait) to end, before it releases the node's
// state lock.
const jobStopWait = 5 * time.Second

// kubeletWipeDelay is how long after the last instance of a DRA driver
// unregistered the kubelet deletes the driver's ResourceSlices (its
// defaultWipingDelay); a stopping daemon stops publishing wipeMargin
// before it.
const (
	kubeletWipeDelay = 30 * time.Second
	wipeMargin       = 5 * time.Second
)

// stopMargin is the time a stop may take beyond --shutdown-wait and
// jobStopWait (the control socket's drain, the last checkpoint flush)
// before stopDeadline ends the process.
const stopMargin = 5 * time.Second

// stopLimit is how long after a stop signal the process ends at the
// latest: the pod's terminationGracePeriodSeconds must exceed it.
func stopLimit(shutdownWait time.Duration) time.Duration {
	return shutdownWait + jobStopWait + stopMargin
}

// stopDeadline ends the process through exit(1) when run has not
// returned (returned) within limit of a stop signal: ctx ended while its
// parent did not. Whatever hangs (a read of a wedged device outside the
// bounded ones, a stuck disk), the daemon then exits within its pod's
// grace period and says so, instead of being killed without a word.
func stopDeadline(ctx, parent context.Context, limit time.Duration, returned <-chan struct{}, exit func(int)) {
	select {
	case <-returned:
		return
	case <-ctx.Done():
	}
	if parent.Err() != nil {
		return // stopped by the caller, not by a signal
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-returned:
	case <-timer.C:
		klog.FromContext(ctx).Error(nil, "Stopping took too long; exiting now", "limit", limit, "cause", context.Cause(ctx))
		klog.Flush()
		exit(1)
	}
}

// stateLockFile, in the plugin directory, is held by the one process that
// owns the node's state (checkpoint, CDI specs, programming, slices).
const stateLockFile = "state.lock"

// startDRA starts the DRA kubelet plugin (the mode for clusters with DRA)
// in standby: registered, discovering, holding the kubelet's calls until
// activateDRA.
func startDRA(ctx context.Context, f runFlags, client kubernetes.Interface, metrics *drivermetrics.Metrics, scanner *discovery.Scanner, events *discovery.UeventSource) (*draplugin.Driver, error) {
	return draplugin.Start(ctx, draplugin.Config{
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

// selfPod is this daemon's pod as "namespace/name", or "" when either is
// not known (not run as a pod, or without the downward API).
func (f runFlags) selfPod() string {
	if f.podName == "" || f.podNamespace == "" {
		return ""
	}
	return f.podNamespace + "/" + f.podName
}
