package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/kubeclient"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

// runFlags are the node daemon's flags.
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

// addFlags registers the daemon's flags (but the OCI and logging ones) on
// fs.
func (f *runFlags) addFlags(fs *pflag.FlagSet) {
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
}

// runFlagTwins are the environment variables that set the daemon's flags
// (DaemonSet manifests set those).
var runFlagTwins = map[string]string{
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
}

// complete checks the flags and fills in the defaults that depend on
// other flags; it returns the card families --kernel-driver selects.
func (f *runFlags) complete() (discovery.Selection, error) {
	if f.nodeName == "" {
		return discovery.Selection{}, errors.New("--node-name (or $NODE_NAME) is required: the node this daemon runs on")
	}
	sel, err := discovery.ParseSelection(f.kernelDriver)
	if err != nil {
		return sel, fmt.Errorf("--kernel-driver: %w", err)
	}
	switch resourceapi.DeviceTaintEffect(f.unhealthyEffect) {
	case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute:
	default:
		return sel, fmt.Errorf("--unhealthy-taint-effect %q: use NoSchedule or NoExecute", f.unhealthyEffect)
	}
	if f.pluginDir == "" {
		f.pluginDir = defaultPluginDir(f.driverName)
	}
	if f.controlSocket == "" {
		f.controlSocket = defaultControlSocket(f.pluginDir)
	}
	return sel, nil
}

// selfPod is this daemon's pod as "namespace/name", or "" when either is
// not known (not run as a pod, or without the downward API).
func (f runFlags) selfPod() string {
	if f.podName == "" || f.podNamespace == "" {
		return ""
	}
	return f.podNamespace + "/" + f.podName
}
