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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/control"
	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

type runFlags struct {
	kubeconfig, nodeName, driverName string
	root, kernelDriver               string
	registrarDir, pluginDir          string
	cdiDir, bitstreamDir, bootIDFile string
	programmer                       string
	simProgramDelay                  time.Duration
	prepareWait                      time.Duration
	refreshInterval                  time.Duration
	programmable                     bool
	kubeAPIQPS                       float32
	kubeAPIBurst                     int
	// Mode selection and the legacy device-plugin endpoint.
	mode, devicePluginMode           string
	devicePluginsDir, resourceDomain string
	controlSocket, hookPath          string
	podResourcesSocket               string
	cdi                              bool
	// Operations.
	ueventSource, metricsAddress, livenessAddress, unhealthyEffect string
}

func newRunCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node daemon (the default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return run(klog.NewContext(ctx, klog.Background()), f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", envOr("KUBECONFIG", ""), "kubeconfig file; in-cluster config when empty [$KUBECONFIG]")
	fs.StringVar(&f.nodeName, "node-name", envOr("NODE_NAME", ""), "name of this node (required) [$NODE_NAME]")
	fs.StringVar(&f.driverName, "driver-name", envOr("DRIVER_NAME", "fpga.dra.dev"), "DRA driver name, also the attribute domain [$DRIVER_NAME]")
	fs.StringVar(&f.root, "root", envOr("FPGA_ROOT", "/"), "directory holding sys/ and dev/; a simulated node's --dir [$FPGA_ROOT]")
	fs.StringVar(&f.kernelDriver, "kernel-driver", envOr("KERNEL_DRIVER", "auto"), "auto, dfl, opae or none [$KERNEL_DRIVER]")
	fs.StringVar(&f.registrarDir, "registrar-dir", envOr("REGISTRAR_DIR", "/var/lib/kubelet/plugins_registry"), "kubelet plugin registration directory [$REGISTRAR_DIR]")
	fs.StringVar(&f.pluginDir, "plugin-dir", envOr("PLUGIN_DIR", ""), "plugin data directory (sockets, checkpoint); /var/lib/kubelet/plugins/<driver-name> when empty [$PLUGIN_DIR]")
	fs.StringVar(&f.cdiDir, "cdi-dir", envOr("CDI_DIR", "/var/run/cdi"), "directory the container runtime reads CDI specs from [$CDI_DIR]")
	fs.StringVar(&f.bitstreamDir, "bitstream-dir", envOr("BITSTREAM_DIR", program.DefaultRepositoryDir), "bitstream repository; claims name files only inside it [$BITSTREAM_DIR]")
	fs.StringVar(&f.programmer, "programmer", envOr("PROGRAMMER", program.KindAuto), "partial-reconfiguration backend: auto, dfl, opae or sim [$PROGRAMMER]")
	fs.DurationVar(&f.simProgramDelay, "sim-program-delay", 2*time.Second, "how long the sim programmer takes per region")
	fs.DurationVar(&f.prepareWait, "prepare-wait", 20*time.Second, "how long one prepare call waits for programming before it reports \"in progress\" (the kubelet gives a call 45s)")
	fs.StringVar(&f.bootIDFile, "boot-id-file", envOr("BOOT_ID_FILE", ""), "boot ID file; <root>/proc/sys/kernel/random/boot_id when it exists, else /proc/sys/kernel/random/boot_id [$BOOT_ID_FILE]")
	fs.DurationVar(&f.refreshInterval, "refresh-interval", 30*time.Second, "how often IDs, error registers and device nodes are re-read")
	fs.BoolVar(&f.programmable, "programmable", envOr("PROGRAMMABLE", "true") == "true", "allow partial reconfiguration on this node [$PROGRAMMABLE]")
	fs.Float32Var(&f.kubeAPIQPS, "kube-api-qps", 50, "API server queries per second; the helper reads every claim it prepares")
	fs.IntVar(&f.kubeAPIBurst, "kube-api-burst", 100, "API server burst")
	fs.StringVar(&f.mode, "mode", envOr("MODE", modeAuto), "API to serve: auto (DRA when the API server serves resource.k8s.io, else device-plugin), dra or device-plugin [$MODE]")
	fs.StringVar(&f.devicePluginMode, "device-plugin-mode", envOr("DEVICE_PLUGIN_MODE", string(deviceplugin.ModeAF)), "device-plugin resources: af (one per loaded function, a device per port) or region (one per interface ID, a device per card, programmed for the container); the node annotation fpga.dra.dev/device-plugin-mode (or fpga.intel.com/device-plugin-mode) overrides it [$DEVICE_PLUGIN_MODE]")
	fs.StringVar(&f.devicePluginsDir, "device-plugins-dir", envOr("DEVICE_PLUGINS_DIR", "/var/lib/kubelet/device-plugins"), "the kubelet's device-plugin directory (kubelet.sock) [$DEVICE_PLUGINS_DIR]")
	fs.StringVar(&f.resourceDomain, "resource-domain", envOr("RESOURCE_DOMAIN", deviceplugin.DefaultDomain), "domain of the device-plugin resource names; fpga.intel.com keeps the Intel FPGA device plugin's names [$RESOURCE_DOMAIN]")
	fs.BoolVar(&f.cdi, "cdi", envOr("CDI", "true") == "true", "device-plugin mode: also hand out CDI devices (and, in region mode, the programming hook) in Allocate [$CDI]")
	fs.StringVar(&f.controlSocket, "control-socket", envOr("CONTROL_SOCKET", ""), "local control socket (programming hook, admin); <plugin-dir>/control.sock when empty [$CONTROL_SOCKET]")
	fs.StringVar(&f.podResourcesSocket, "pod-resources-socket", envOr("POD_RESOURCES_SOCKET", deviceplugin.DefaultPodResourcesSocket), "the kubelet's pod-resources socket: in DRA mode, device-plugin holds left from an earlier mode are released once it lists no container with their ports [$POD_RESOURCES_SOCKET]")
	fs.StringVar(&f.hookPath, "hook-path", envOr("HOOK_PATH", ""), "this program's path on the host, run by the container runtime as the region programming hook; this process's executable when empty [$HOOK_PATH]")
	fs.StringVar(&f.ueventSource, "uevent-source", envOr("UEVENT_SOURCE", "netlink"), "where hot-plug uevents come from: netlink (the kernel), unix:PATH (a datagram socket a simulated node sends to) or none (full rescans every refresh interval) [$UEVENT_SOURCE]")
	fs.StringVar(&f.metricsAddress, "metrics-address", envOr("METRICS_ADDRESS", ""), "serve Prometheus /metrics on this address (e.g. :9400); off when empty [$METRICS_ADDRESS]")
	fs.StringVar(&f.livenessAddress, "liveness-address", envOr("LIVENESS_ADDRESS", ""), "serve the gRPC liveness probe (grpc.health.v1) on this address (e.g. :51515); off when empty [$LIVENESS_ADDRESS]")
	fs.StringVar(&f.unhealthyEffect, "unhealthy-taint-effect", envOr("UNHEALTHY_TAINT_EFFECT", string(resourceapi.DeviceTaintEffectNoSchedule)), "effect of the taint on an unhealthy device: NoSchedule, or NoExecute to also evict its pods [$UNHEALTHY_TAINT_EFFECT]")
	klogFlags := goflagSet()
	fs.AddGoFlagSet(klogFlags)
	return cmd
}

func run(ctx context.Context, f runFlags) error {
	logger := klog.FromContext(ctx)
	if f.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required: the node this daemon runs on")
	}
	force, err := discovery.ParseKernelDriver(f.kernelDriver)
	if err != nil {
		return fmt.Errorf("--kernel-driver: %w", err)
	}
	if f.pluginDir == "" {
		f.pluginDir = filepath.Join("/var/lib/kubelet/plugins", f.driverName)
	}
	if f.controlSocket == "" {
		f.controlSocket = defaultControlSocket(f.pluginDir)
	}
	client, err := kubeClient(f.kubeconfig, f.kubeAPIQPS, f.kubeAPIBurst)
	if err != nil {
		return err
	}
	mode, why, err := resolveMode(ctx, f.mode, client.Discovery())
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
	scanner := &discovery.Scanner{Root: f.root, Force: force}
	st, err := newState(ctx, f, client)
	if err != nil {
		return err
	}
	// Restore CDI specs and holds before the kubelet can call us.
	initial, err := scanner.Scan()
	if err != nil {
		return fmt.Errorf("discover devices: %w", err)
	}
	if err := st.state.Restore(ctx, initial); err != nil {
		logger.Error(err, "Restoring prepared claims was incomplete")
	}
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
	if f.metricsAddress != "" {
		if err := serveMetrics(ctx, f.metricsAddress, st.metrics); err != nil {
			return fmt.Errorf("--metrics-address: %w", err)
		}
	}
	var devices func() *discovery.Result
	var refresh, stop func()
	var registered func() bool
	if mode == modeDevicePlugin {
		p, err := startDevicePlugin(ctx, f, client, st.state, scanner, events)
		if err != nil {
			return err
		}
		devices, refresh, stop = p.Devices, p.RefreshDevices, p.Stop
	} else {
		d, err := startDRA(ctx, f, client, st, scanner, events)
		if err != nil {
			return err
		}
		devices, refresh, stop = d.Devices, d.RefreshDevices, d.Stop
		registered = func() bool {
			st := d.Helper().RegistrationStatus()
			return st != nil && st.PluginRegistered
		}
		if f.livenessAddress != "" {
			serveLiveness(ctx, f.livenessAddress, d)
		}
		go deviceplugin.ReleaseStaleHolds(ctx, st.state, f.podResourcesSocket, f.refreshInterval, d.Devices)
	}
	ctl, err := control.Listen(ctx, f.controlSocket, &control.Node{
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
	stop()
	<-ctlDone
	return nil
}

// startDRA starts the DRA kubelet plugin (the mode for clusters with DRA).
func startDRA(ctx context.Context, f runFlags, client kubernetes.Interface, st *nodeState, scanner *discovery.Scanner, events *discovery.UeventSource) (*draplugin.Driver, error) {
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
		Metrics:         st.metrics,
		Claims:          &draplugin.Claims{DriverName: f.driverName, PoolName: f.nodeName, State: st.state, Recorder: st.recorder, Metrics: st.metrics},
	})
	if err != nil {
		return nil, err
	}
	st.driver.Store(d)
	return d, nil
}

func kubeClient(kubeconfig string, qps float32, burst int) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (set --kubeconfig outside a cluster): %w", err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = "fpga-dra-driver"
	return kubernetes.NewForConfig(cfg)
}
