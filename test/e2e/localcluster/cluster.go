// Package localcluster runs a real single-node Kubernetes cluster on
// 127.0.0.1 for end-to-end tests and the demo: etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager, containerd 2.x with CDI, and a
// kubelet, all from binaries built by hack/e2e/build-cluster-binaries.sh.
// Every run has its own directory and ports; Down stops every process by
// PID and removes what the run created.
package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Config says where the binaries are and how to run.
type Config struct {
	// BinDir holds the cluster binaries.
	BinDir string
	// Repo is the repository root (to build the e2e images).
	Repo string
	// Dir is the run directory; a new one below os.TempDir() when empty.
	Dir string
	// NodeName of the single node; "fpga-e2e-node" when empty.
	NodeName string
	// CDIDir is where containerd reads CDI specs; Dir/cdi when empty.
	CDIDir string
	// Detach keeps the processes running after the caller exits (the
	// demo); tests leave it false so nothing outlives them.
	Detach bool
	// ControlPlaneOnly starts etcd, kube-apiserver, kube-scheduler and
	// kube-controller-manager only: no containerd, no kubelet, no node of
	// its own (the caller brings nodes, e.g. kwok's fake ones).
	ControlPlaneOnly bool
	// APIServerOnly starts etcd and kube-apiserver only (benchmarks of a
	// node's side that act as the kubelet and need no scheduler).
	APIServerOnly bool
	// Logf reports progress; silent when nil.
	Logf func(format string, args ...any)
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg      Config
	Dir      string
	LogDir   string
	NodeName string
	CDIDir   string
	// KubeletRoot is the kubelet's --root-dir: DRA plugins register in
	// KubeletRoot/plugins_registry and keep sockets in KubeletRoot/plugins.
	KubeletRoot string
	// PodLogsDir holds the containers' log files.
	PodLogsDir string
	// AdminKubeconfig has system:masters credentials.
	AdminKubeconfig string
	Server          string
	Client          kubernetes.Interface
	pki             *pki
	procs           []*Process
	containerdSock  string
	etcdURL         string
	kubelet         *Process
	apiServer       *Process
	// apiServerExtra are further kube-apiserver flags (RestartAPIServer).
	apiServerExtra []string
}

// Up starts the cluster and waits until the node is Ready. On failure it
// stops what it started.
func Up(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.NodeName == "" {
		cfg.NodeName = "fpga-e2e-node"
	}
	bins := []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet", "containerd", "ctr", "containerd-shim-runc-v2"}
	hostTools := []string{"runc", "mount", "iptables"}
	if cfg.ControlPlaneOnly {
		bins, hostTools = bins[:4], nil
	}
	if cfg.APIServerOnly {
		bins, hostTools = bins[:2], nil
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("cluster binary %s missing in %s: run hack/e2e/build-cluster-binaries.sh", b, cfg.BinDir)
		}
	}
	for _, b := range hostTools {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("%s is not installed: run hack/e2e/build-cluster-binaries.sh, which installs it", b)
		}
	}
	dir := cfg.Dir
	if dir == "" {
		// Short: the kubelet's plugin sockets below it must stay within
		// the 107 bytes of a unix socket path, and the driver's
		// registration socket for rolling updates is
		// kubelet/plugins_registry/<driver>-<pod UID>-reg.sock.
		if dir, err = os.MkdirTemp("", "fdra-"); err != nil {
			return nil, err
		}
	}
	c := &Cluster{cfg: cfg, Dir: dir, LogDir: filepath.Join(dir, "logs"), NodeName: cfg.NodeName,
		KubeletRoot: filepath.Join(dir, "kubelet"), PodLogsDir: filepath.Join(dir, "pod-logs"),
		CDIDir: cfg.CDIDir, containerdSock: filepath.Join(dir, "ctd", "containerd.sock")}
	if c.CDIDir == "" {
		c.CDIDir = filepath.Join(dir, "cdi")
	}
	for _, d := range []string{c.LogDir, c.KubeletRoot, c.PodLogsDir, c.CDIDir, filepath.Join(dir, "cni"), filepath.Join(dir, "images")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			c.Down()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "bin"), []byte(cfg.BinDir), 0o644); err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"certificates", c.certificates},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"kube-scheduler and kube-controller-manager", c.startControllers},
		{"images", c.buildImages},
		{"containerd", c.startContainerd},
		{"kubelet", c.startKubelet},
		{"node Ready", c.waitNodeReady},
	}
	if cfg.ControlPlaneOnly {
		steps = steps[:4] // up to the scheduler and the controller manager
	}
	if cfg.APIServerOnly {
		steps = steps[:3] // up to the API server
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		c.logf("%s ready in %s", s.name, time.Since(start).Round(10*time.Millisecond))
	}
	return c, nil
}

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

// FreePorts returns n TCP ports on 127.0.0.1 that are free now.
func FreePorts(n int) ([]int, error) { return freePorts(n) }

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.cfg.BinDir, name) }
