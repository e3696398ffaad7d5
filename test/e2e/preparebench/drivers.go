package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/tools/clientcmd"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

// driver is one running DRA kubelet plugin the bench calls as the kubelet.
type driver struct {
	// name is the driver's name in the figures.
	name string
	// driverName is its DRA driver name, sock its dra.sock.
	driverName, sock string
	proc             *localcluster.Process
	client           drapbv1.DRAPluginClient
	// devices are published devices of the node, one per worker.
	devices []string
	// pprof is the address our daemon serves profiles on.
	pprof string
	// writesStatus: the driver reports prepared devices in the claim's
	// status (ours); claims reads them.
	writesStatus bool
	claims       resourcev1.ResourceClaimInterface
}

// createNode creates the Node object the drivers publish their slices for
// (the kubeletplugin library owns slices by the node's UID).
func createNode(ctx context.Context, c *localcluster.Cluster) error {
	_, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.NodeName}}, metav1.CreateOptions{})
	return err
}

// adminClient is an admin client of c's API server at qps.
func adminClient(c *localcluster.Cluster, qps int) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = float32(qps), 2*qps
	return kubernetes.NewForConfig(rc)
}

// startDrivers starts ours first, then the test driver and the example
// driver when --drivers holds them, and waits until each serves.
func startDrivers(ctx context.Context, c *localcluster.Cluster, o options, logf func(string, ...any)) ([]*driver, error) {
	want := func(name string) bool { return o.only == "" || slices.Contains(strings.Split(o.only, ","), name) }
	starts := []struct {
		name  string
		bin   string
		start func(context.Context, *localcluster.Cluster, options, string) (*driver, error)
	}{
		{"fpga", "", ours("fpga", localcluster.DriverName, o.repo)},
		{"before", "", ours("before", "before."+localcluster.DriverName, o.before)},
		{"test", "dra-test-driver", startTestDriver},
		{"example", "dra-example-kubeletplugin", startExampleDriver},
	}
	need := slices.Max(o.concurrency)
	for _, dir := range []string{"registry", "plugins", "cdi-test", "cdi-example"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, dir), 0o755); err != nil {
			return nil, err
		}
	}
	var out []*driver
	for _, s := range starts {
		if !want(s.name) || (s.name == "before" && o.before == "") {
			continue
		}
		bin := ""
		if s.bin != "" {
			if o.drivers == "" {
				logf("no --drivers: %s not measured", s.name)
				continue
			}
			bin = filepath.Join(o.drivers, s.bin)
			if _, err := os.Stat(bin); err != nil {
				return nil, fmt.Errorf("%s: %w (hack/e2e/build-bench-drivers.sh builds it)", s.name, err)
			}
		}
		d, err := s.start(ctx, c, o, bin)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", s.name, err)
		}
		if err := d.waitServing(ctx, c, need); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		logf("%s serves on %s with devices %v", d.name, d.sock, d.devices)
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("no driver to measure (see --only)")
	}
	return out, nil
}

// ours starts our driver built from repo with the pprof tag, as name with
// the DRA driver name driverName, in DRA mode on a simulated node of eight
// single-port DFL cards, with its defaults.
func ours(name, driverName, repo string) func(context.Context, *localcluster.Cluster, options, string) (*driver, error) {
	return func(ctx context.Context, c *localcluster.Cluster, o options, _ string) (*driver, error) {
		dir := filepath.Join(c.Dir, name)
		bin := filepath.Join(dir, "fpga-dra-driver")
		build := exec.CommandContext(ctx, "go", "build", "-tags", "pprof", "-o", bin, "./cmd/fpga-dra-driver")
		build.Dir = repo
		if b, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build in %s: %w\n%s", repo, err, b)
		}
		root := filepath.Join(dir, "node")
		if _, err := simnode.Write(root, simnode.Options{Driver: discovery.DriverDFL, Cards: 8, PortsPerCard: 1}); err != nil {
			return nil, err
		}
		bitstreams := filepath.Join(root, "srv/fpga/bitstreams")
		if err := os.MkdirAll(bitstreams, 0o755); err != nil {
			return nil, err
		}
		ports, err := localcluster.FreePorts(1)
		if err != nil {
			return nil, err
		}
		d := &driver{name: name, driverName: driverName, pprof: fmt.Sprintf("127.0.0.1:%d", ports[0]),
			writesStatus: true, claims: c.Client.ResourceV1().ResourceClaims(namespace)}
		pluginDir := filepath.Join(c.Dir, "plugins", d.driverName)
		d.sock = filepath.Join(pluginDir, "dra.sock")
		d.proc, err = c.Start(d.name, bin, []string{"run", "--mode=dra", "--driver-name", driverName,
			"--kubeconfig", c.AdminKubeconfig, "--node-name", c.NodeName,
			"--kube-api-qps", fmt.Sprint(o.qps), "--kube-api-burst", fmt.Sprint(2 * o.qps),
			"--root", root, "--registrar-dir", filepath.Join(c.Dir, "registry"), "--plugin-dir", pluginDir,
			"--cdi-dir", filepath.Join(dir, "cdi"),
			"--bitstream-dir", bitstreams, "--bitstream-cache-dir", filepath.Join(dir, "oci-cache"),
			"--programmer", "sim", "--uevent-source", "none",
			"--pod-resources-socket", filepath.Join(dir, "pod-resources.sock"),
		}, []string{"FPGA_DRA_PPROF_ADDRESS=" + d.pprof})
		return d, err
	}
}

// startTestDriver runs the upstream DRA test driver's kubelet plugin.
func startTestDriver(_ context.Context, c *localcluster.Cluster, o options, bin string) (*driver, error) {
	return startPlugin(c, "test", "test-driver.cdi.k8s.io", bin, []string{
		"--kubeconfig", c.AdminKubeconfig, "--kube-api-qps", fmt.Sprint(o.qps), "--kube-api-burst", fmt.Sprint(2 * o.qps),
		"kubelet-plugin", "--node-name", c.NodeName, "--num-devices", "8",
		"--datadir", filepath.Join(c.Dir, "plugins"), "--plugin-registration-path", filepath.Join(c.Dir, "registry"),
		"--cdi-dir", filepath.Join(c.Dir, "cdi-test"),
	})
}

// startExampleDriver runs dra-example-driver's kubelet plugin (GPU profile).
func startExampleDriver(_ context.Context, c *localcluster.Cluster, o options, bin string) (*driver, error) {
	return startPlugin(c, "example", "gpu.example.com", bin, []string{
		"--kubeconfig", c.AdminKubeconfig, "--kube-api-qps", fmt.Sprint(o.qps), "--kube-api-burst", fmt.Sprint(2 * o.qps),
		"--node-name", c.NodeName, "--num-devices", "8", "--cdi-root", filepath.Join(c.Dir, "cdi-example"),
		"--kubelet-registrar-directory-path", filepath.Join(c.Dir, "registry"),
		"--kubelet-plugins-directory-path", filepath.Join(c.Dir, "plugins"),
	})
}

// startPlugin runs bin with args as the driver name, which serves
// driverName's socket below the run's plugins directory.
func startPlugin(c *localcluster.Cluster, name, driverName, bin string, args []string) (*driver, error) {
	d := &driver{name: name, driverName: driverName, sock: filepath.Join(c.Dir, "plugins", driverName, "dra.sock")}
	if err := os.MkdirAll(filepath.Dir(d.sock), 0o750); err != nil {
		return nil, err
	}
	var err error
	d.proc, err = c.Start(name+"-driver", bin, args, nil)
	return d, err
}

// waitServing waits until the driver published at least need devices of
// the node and answers a prepare of no claims (the kubelet's liveness
// call) on its socket.
func (d *driver) waitServing(ctx context.Context, c *localcluster.Cluster, need int) error {
	conn, err := grpc.NewClient("unix://"+d.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(addr, "unix://"))
		}))
	if err != nil {
		return err
	}
	d.client = drapbv1.NewDRAPluginClient(conn)
	return c.WaitFor(ctx, d.proc, 90*time.Second, func() error {
		list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.NodeName})
		if err != nil {
			return err
		}
		var devices []string
		for _, s := range list.Items {
			if s.Spec.Driver == d.driverName {
				for _, dev := range s.Spec.Devices {
					devices = append(devices, dev.Name)
				}
			}
		}
		if len(devices) < need {
			return fmt.Errorf("%d devices of %s published, want %d", len(devices), d.driverName, need)
		}
		slices.Sort(devices)
		d.devices = devices[:need]
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err = d.client.NodePrepareResources(callCtx, &drapbv1.NodePrepareResourcesRequest{})
		return err
	})
}
