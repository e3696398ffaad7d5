package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// DriverName is the DRA driver name the FPGA node runs with.
const DriverName = v1alpha1.DriverName

// SlowAFUID is an AFU whose sample bitstream the simulated programmer
// takes SlowProgramming to load: longer than the kubelet gives a prepare
// call (45 s). FPGA_DRA_E2E_SLOW_PROGRAMMING (a duration) sets it, e.g. to
// 2m for the scheduler's side of the limit.
const SlowAFUID = "5104e2e0b1d1c0de5104e2e0b1d1c0de"

var SlowProgramming = func() string {
	if v := os.Getenv("FPGA_DRA_E2E_SLOW_PROGRAMMING"); v != "" {
		if _, err := time.ParseDuration(v); err == nil {
			return v
		}
	}
	return "50s"
}()

// FPGANode is the driver running as a host process of the cluster's node,
// on a simulated FPGA tree with the simulated programmer.
type FPGANode struct {
	Dir, Bin, Root string
	// CacheDir is the host directory of the driver's cache of bitstreams
	// pulled from OCI registries.
	CacheDir string
	// Sim is the simulated tree; change it the way the kernel would and
	// tell the driver with Uevent.
	Sim     *simnode.Node
	uevents string
	proc    *Process
	args    []string
	c       *Cluster

	// With a chart image, Start installs the Helm chart (the daemon as a
	// DaemonSet pod, the controller as a Deployment) instead of running a
	// host process.
	chartArchive, chartRef string
	chart                  *Chart

	// registry is how the driver reaches OCI registries (UseRegistry).
	registry RegistryAccess
}

// UseChart makes Start install the driver from the Helm chart with the
// image archive (reference ref), as users run it. Stop it first if it runs.
func (n *FPGANode) UseChart(archive, ref string) { n.chartArchive, n.chartRef = archive, ref }

// FromChart reports whether the driver runs from the Helm chart.
func (n *FPGANode) FromChart() bool { return n.chartArchive != "" }

// StartFPGANode builds the driver, writes a simulated node of four
// single-port DFL cards (ports of cards 1 and 3 carry simnode.DefaultAFUID,
// of cards 2 and 4 simnode.SecondAFUID) with a sample bitstream repository,
// and runs the driver until it has published its ResourceSlice.
func (c *Cluster) StartFPGANode(ctx context.Context) (*FPGANode, error) {
	n := &FPGANode{Dir: filepath.Join(c.Dir, "fpga"), c: c}
	n.Bin = filepath.Join(n.Dir, "fpga-dra-driver")
	n.Root = filepath.Join(n.Dir, "node")
	n.CacheDir = filepath.Join(n.Dir, "oci-cache")
	// Inside the simulated tree: the chart mounts the tree into the pod.
	n.uevents = filepath.Join(n.Root, "uevents.sock")
	build := exec.CommandContext(ctx, "go", "build", "-o", n.Bin, "./cmd/fpga-dra-driver")
	build.Dir = c.cfg.Repo
	if b, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build driver: %w\n%s", err, b)
	}
	sn, err := simnode.Write(n.Root, simnode.Options{Driver: discovery.DriverDFL, Cards: 4, PortsPerCard: 1})
	if err != nil {
		return nil, err
	}
	if sn.RegularFiles {
		return nil, fmt.Errorf("this process cannot create character devices (mknod), which the container runtime needs: run as root")
	}
	n.Sim = sn
	if _, err := program.WriteSimRepository(filepath.Join(n.Root, "srv/fpga/bitstreams"), simnode.DefaultInterfaceID,
		[]string{simnode.SampleAFUID, simnode.DefaultAFUID, simnode.SecondAFUID, SlowAFUID}); err != nil {
		return nil, err
	}
	n.args = []string{
		"run",
		"--kubeconfig", c.AdminKubeconfig,
		"--node-name", c.NodeName,
		"--root", n.Root,
		"--registrar-dir", filepath.Join(c.KubeletRoot, "plugins_registry"),
		"--plugin-dir", filepath.Join(c.KubeletRoot, "plugins", DriverName),
		"--cdi-dir", c.CDIDir,
		"--bitstream-dir", filepath.Join(n.Root, "srv/fpga/bitstreams"),
		"--bitstream-cache-dir", n.CacheDir,
		"--programmer", "sim", "--sim-program-delay", "1s", "--sim-program-delays", SlowAFUID + "=" + SlowProgramming,
		"--uevent-source", "unix:" + n.uevents,
		"--refresh-interval", "2s",
		"--pod-resources-socket", filepath.Join(c.KubeletRoot, "pod-resources/kubelet.sock"),
		"-v", "4",
	}
	return n, n.Start(ctx)
}

// Start runs the driver in DRA mode (from the chart when UseChart was
// called, else as a host process) and waits until the kubelet registered it
// and its ResourceSlice is published.
func (n *FPGANode) Start(ctx context.Context) error {
	if n.FromChart() {
		ch, err := n.c.InstallChart(ctx, n, n.chartArchive, n.chartRef)
		n.chart = ch
		if err != nil {
			return err
		}
		return n.waitPublished(ctx, nil)
	}
	registry, err := n.registryArgs()
	if err != nil {
		return err
	}
	args := append(append(slices.Clip(n.args), registry...), "--mode=dra")
	p, err := n.c.Start("fpga-dra-driver", n.Bin, args, nil)
	if err != nil {
		return err
	}
	n.proc = p
	if err := n.c.waitFor(ctx, p, 60*time.Second, func() error { return n.registered(ctx) }); err != nil {
		return err
	}
	return n.waitPublished(ctx, p)
}

// registered asks the daemon's control socket whether the kubelet
// registered it.
func (n *FPGANode) registered(ctx context.Context) error {
	list, err := adminapi.NewClient(filepath.Join(n.c.KubeletRoot, "plugins", DriverName, "control.sock")).List(ctx)
	if err != nil {
		return err
	}
	if list.Registered == nil || !*list.Registered {
		return fmt.Errorf("the kubelet has not registered the driver yet")
	}
	return nil
}

// waitPublished waits for the driver's ResourceSlice (p: the host process
// to watch for an early exit, nil for the chart's pod).
func (n *FPGANode) waitPublished(ctx context.Context, p *Process) error {
	return n.c.waitFor(ctx, p, 60*time.Second, func() error {
		list, err := n.c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.c.NodeName})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			if s.Spec.Driver == DriverName {
				return nil
			}
		}
		return fmt.Errorf("no ResourceSlice of %s yet", DriverName)
	})
}

// DevicePluginsDir is where every kubelet serves its device-plugin
// registration socket, whatever its --root-dir.
const DevicePluginsDir = "/var/lib/kubelet/device-plugins"

// StartDevicePlugin runs the driver in legacy device-plugin mode and waits
// until the node advertises resource (e.g. "fpga.dra.dev/af-695.d84...").
func (n *FPGANode) StartDevicePlugin(ctx context.Context, resource string) error {
	p, err := n.c.Start("fpga-dra-driver", n.Bin, append(n.args, "--mode=device-plugin", "--device-plugins-dir", DevicePluginsDir), nil)
	if err != nil {
		return err
	}
	n.proc = p
	return n.c.waitFor(ctx, p, 60*time.Second, func() error {
		node, err := n.c.Client.CoreV1().Nodes().Get(ctx, n.c.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q, ok := node.Status.Allocatable[corev1.ResourceName(resource)]; ok && !q.IsZero() {
			return nil
		}
		return fmt.Errorf("node does not advertise %s yet", resource)
	})
}

// Stop ends the driver: the host process (SIGTERM), or uninstalls the chart.
func (n *FPGANode) Stop() {
	if n.proc != nil {
		n.proc.Stop(20 * time.Second)
		n.proc = nil
	}
	if n.chart != nil {
		if err := n.chart.Uninstall(context.Background()); err != nil {
			n.c.logf("uninstall chart: %v", err)
		}
		n.chart = nil
	}
}

// Restart stops the driver and starts it again: the host process, or the
// chart's pod (deleted; the DaemonSet starts a new one).
func (n *FPGANode) Restart(ctx context.Context) error {
	if n.chart == nil {
		n.Stop()
		return n.Start(ctx)
	}
	pods, err := n.c.Client.CoreV1().Pods(ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=kubeletplugin"})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if err := n.c.Client.CoreV1().Pods(ChartNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := n.c.waitFor(ctx, nil, 60*time.Second, func() error {
			if _, err := n.c.Client.CoreV1().Pods(ChartNamespace).Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("driver pod %s still terminating", p.Name)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if err := n.c.waitFor(ctx, nil, 120*time.Second, func() error { return n.registered(ctx) }); err != nil {
		return fmt.Errorf("%w; pods: %s", err, n.c.podSummary(ctx, ChartNamespace))
	}
	return n.waitPublished(ctx, nil)
}

// Uevent sends a kernel-format uevent about a sysfs path of the simulated
// tree to the driver's uevent socket, with further KEY=VALUE fields env.
func (n *FPGANode) Uevent(action, sysPath, subsystem string, env ...string) error {
	devpath := strings.TrimPrefix(sysPath, n.Root+"/sys")
	msg := fmt.Sprintf("%s@%s\x00ACTION=%s\x00DEVPATH=%s\x00SUBSYSTEM=%s\x00", action, devpath, action, devpath, subsystem)
	for _, kv := range env {
		msg += kv + "\x00"
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, []byte(msg), 0, &unix.SockaddrUnix{Name: n.uevents}); err != nil {
		return fmt.Errorf("send uevent: %w", err)
	}
	return nil
}

// AddAlveo hot-plugs one Alveo card per model (simnode.AlveoModels) into
// the simulated node, beside its Intel cards, as XRT shows them; installs
// into the node's repository an xclbin of simnode.SampleXclbinUUID for each
// card's shell; tells the driver with the PCI uevents the kernel sends; and
// waits until the driver publishes the cards.
func (n *FPGANode) AddAlveo(ctx context.Context, models ...string) ([]*simnode.AlveoCard, error) {
	var cards []*simnode.AlveoCard
	for _, m := range models {
		c, err := n.Sim.AddAlveo(m)
		if err != nil {
			return nil, err
		}
		if _, err := program.WriteSimXclbinRepository(filepath.Join(n.Root, "srv/fpga/bitstreams"), c.Model.InterfaceIDs[0], c.Model.Platform,
			[]string{simnode.SampleXclbinUUID}); err != nil {
			return nil, err
		}
		for _, pf := range []string{c.MgmtPath, c.UserPath} {
			if err := n.Uevent("add", pf, "pci", "PCI_CLASS=120000", "PCI_SLOT_NAME="+filepath.Base(pf)); err != nil {
				return nil, err
			}
		}
		cards = append(cards, c)
	}
	return cards, n.c.waitFor(ctx, nil, 60*time.Second, func() error {
		published := map[string]bool{}
		list, err := n.c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.c.NodeName})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				published[d.Name] = s.Spec.Driver == DriverName
			}
		}
		for _, c := range cards {
			if name := (&discovery.Port{PCIAddress: c.UserAddress}).DeviceName(); !published[name] {
				return fmt.Errorf("the Alveo card %s (%s) is not published yet", name, c.Model.Name)
			}
		}
		return nil
	})
}

// StartController builds and runs fpga-dra-controller as a host process
// after applying the CRDs from crdDir; extra flags are appended (the
// webhook is off unless they turn it on).
func (c *Cluster) StartController(ctx context.Context, crdDir string, extra ...string) (*Process, error) {
	bin := filepath.Join(c.Dir, "fpga", "fpga-dra-controller")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return nil, err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/fpga-dra-controller")
	build.Dir = c.cfg.Repo
	if b, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build controller: %w\n%s", err, b)
	}
	if err := c.kubectl(ctx, "apply", "--server-side", "-f", crdDir); err != nil {
		return nil, err
	}
	if err := c.kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/acceleratorfunctions.fpga.dra.dev", "crd/fpgaregions.fpga.dra.dev"); err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig", c.AdminKubeconfig, "--namespace", "default", "--leader-elect=false",
		"--webhook=false", "--http-address", "127.0.0.1:0",
	}
	return c.Start("fpga-dra-controller", bin, append(args, extra...), nil)
}

// IssueServingCert issues a serving certificate from the cluster's CA for
// hosts and returns the certificate and key files and the CA bundle.
func (c *Cluster) IssueServingCert(name string, hosts ...string) (certFile, keyFile string, caPEM []byte, err error) {
	if err := c.pki.issue(name, name, nil, hosts...); err != nil {
		return "", "", nil, err
	}
	caPEM, err = os.ReadFile(c.pki.path("ca.crt"))
	return c.pki.path(name + ".crt"), c.pki.path(name + ".key"), caPEM, err
}
