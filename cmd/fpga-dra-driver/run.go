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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

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
	for _, dir := range []string{f.registrarDir, f.pluginDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	client, err := kubeClient(f.kubeconfig, f.kubeAPIQPS, f.kubeAPIBurst)
	if err != nil {
		return err
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
	events, err := discovery.NewNetlinkUeventSource()
	if err != nil {
		logger.Error(err, "Kernel uevents unavailable; hot-plug is seen through full rescans every refresh interval")
		events = nil
	}
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
		Claims:          &draplugin.Claims{DriverName: f.driverName, PoolName: f.nodeName, State: st.state, Recorder: st.recorder},
	})
	if err != nil {
		return err
	}
	st.driver.Store(d)
	<-ctx.Done()
	logger.Info("Shutting down", "cause", context.Cause(ctx))
	d.Stop()
	return nil
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
