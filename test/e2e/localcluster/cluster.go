// Package localcluster runs a real single-node Kubernetes cluster on
// 127.0.0.1 for end-to-end tests and the demo: etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager, containerd 2.x with CDI, and a
// kubelet, all from binaries built by hack/e2e/build-cluster-binaries.sh.
// Every run has its own directory and ports; Down stops every process by
// PID and removes what the run created.
package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
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

func (c *Cluster) certificates(context.Context) error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	if err := p.issue("apiserver", "kube-apiserver", nil, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"); err != nil {
		return err
	}
	clients := map[string][2]any{
		"admin":              {"fpga-e2e-admin", []string{"system:masters"}},
		"scheduler":          {"system:kube-scheduler", []string(nil)},
		"controller-manager": {"system:kube-controller-manager", []string(nil)},
		"kubelet":            {"system:node:" + c.NodeName, []string{"system:nodes"}},
	}
	for name, v := range clients {
		if err := p.issue(name, v[0].(string), v[1].([]string)); err != nil {
			return err
		}
	}
	return p.serviceAccountKey()
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	p, err := c.Start("etcd", c.bin("etcd"), []string{
		"--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--unsafe-no-fsync", "--log-level", "warn",
	}, nil)
	if err != nil {
		return err
	}
	c.etcdURL = client
	return c.waitHTTP(ctx, p, client+"/health", nil)
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	if c.Server == "" {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		c.Server = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	}
	port := strings.TrimPrefix(c.Server, "https://127.0.0.1:")
	pk := c.pki.path
	p, err := c.Start("kube-apiserver", c.bin("kube-apiserver"), append([]string{
		"--etcd-servers", c.etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", port,
		"--endpoint-reconciler-type", "none",
		"--tls-cert-file", pk("apiserver.crt"), "--tls-private-key-file", pk("apiserver.key"),
		"--client-ca-file", pk("ca.crt"),
		"--service-account-key-file", pk("sa.pub"), "--service-account-signing-key-file", pk("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true",
		"--cert-dir", filepath.Join(c.Dir, "apiserver-certs"),
	}, c.apiServerExtra...), nil)
	if err != nil {
		return err
	}
	c.apiServer = p
	if c.AdminKubeconfig, err = c.pki.kubeconfig("admin", c.Server); err != nil {
		return err
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, p, c.Server+"/readyz", tlsCfg); err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	c.Client, err = kubernetes.NewForConfig(rc)
	return err
}

// tlsConfig authenticates as admin against the API server.
func (c *Cluster) tlsConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.pki.path("admin.crt"), c.pki.path("admin.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(c.pki.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

func (c *Cluster) startControllers(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	sched, err := c.pki.kubeconfig("scheduler", c.Server)
	if err != nil {
		return err
	}
	cm, err := c.pki.kubeconfig("controller-manager", c.Server)
	if err != nil {
		return err
	}
	if _, err := c.Start("kube-scheduler", c.bin("kube-scheduler"), []string{
		"--kubeconfig", sched, "--authentication-kubeconfig", sched, "--authorization-kubeconfig", sched,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[0]),
	}, nil); err != nil {
		return err
	}
	if _, err := c.Start("kube-controller-manager", c.bin("kube-controller-manager"), []string{
		"--kubeconfig", cm, "--authentication-kubeconfig", cm, "--authorization-kubeconfig", cm,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[1]),
		"--service-account-private-key-file", c.pki.path("sa.key"), "--root-ca-file", c.pki.path("ca.crt"),
		"--use-service-account-credentials=true",
	}, nil); err != nil {
		return err
	}
	return nil
}

func (c *Cluster) buildImages(context.Context) error {
	for _, img := range []struct{ pkg, ref, file string }{
		{"test/e2e/images/pause", PauseImage, "pause.tar"},
		{"test/e2e/images/probe", ProbeImage, "probe.tar"},
	} {
		if err := buildImage(c.cfg.Repo, img.pkg, img.ref, filepath.Join(c.Dir, "images", img.file)); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	// Short: shim sockets live below the state directory and a unix
	// socket path has at most 108 bytes.
	root := filepath.Join(c.Dir, "ctd")
	cni := filepath.Join(c.Dir, "cni")
	conf := fmt.Sprintf(`version = 3
root = '%[1]s/root'
state = '%[1]s/s'

[grpc]
  address = '%[2]s'

[plugins]
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '%[3]s'

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    cdi_spec_dirs = ['%[4]s']

    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni', '/opt/cni/bin']
      conf_dir = '%[5]s'
`, root, c.containerdSock, PauseImage, c.CDIDir, cni)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	confPath := filepath.Join(root, "config.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	bridgeName := fmt.Sprintf("fdra%d", os.Getpid()%10000)
	if err := os.WriteFile(filepath.Join(c.Dir, "bridge"), []byte(bridgeName), 0o644); err != nil {
		return err
	}
	bridge := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "fpga-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "%s", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/24"}]], "dataDir": "%s"}},
    {"type": "loopback"}
  ]
}`, bridgeName, filepath.Join(c.Dir, "cni-ipam"))
	if err := os.WriteFile(filepath.Join(cni, "10-fpga-e2e.conflist"), []byte(bridge), 0o644); err != nil {
		return err
	}
	p, err := c.Start("containerd", c.bin("containerd"), []string{"--config", confPath},
		[]string{"PATH=" + c.cfg.BinDir + ":" + os.Getenv("PATH")})
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, p, 30*time.Second, func() error {
		_, err := os.Stat(c.containerdSock)
		return err
	}); err != nil {
		return err
	}
	for _, img := range []string{"pause.tar", "probe.tar"} {
		cmd := exec.CommandContext(ctx, c.bin("ctr"), "--address", c.containerdSock, "-n", "k8s.io", "images", "import", "--all-platforms", filepath.Join(c.Dir, "images", img))
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("import %s: %w\n%s", img, err, b)
		}
	}
	return nil
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kc, err := c.pki.kubeconfig("kubelet", c.Server)
	if err != nil {
		return err
	}
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
podLogsDir: %s
resolvConf: ""
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
evictionHard: {"memory.available": "1Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, c.containerdSock, ports[0], ports[1], c.PodLogsDir, c.pki.path("ca.crt"))
	confPath := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := c.Start("kubelet", c.bin("kubelet"), []string{
		"--config", confPath, "--kubeconfig", kc, "--root-dir", c.KubeletRoot,
		"--cert-dir", filepath.Join(c.Dir, "kubelet-certs"), "--hostname-override", c.NodeName,
	}, []string{"PATH=" + c.cfg.BinDir + ":" + os.Getenv("PATH")})
	if err != nil {
		return err
	}
	c.kubelet = p
	return c.waitHTTP(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]), nil)
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// address with the flags of the first start and extra (e.g.
// "--feature-gates=DRADeviceBindingConditions=false"; none restores the
// first start's), and waits until it is ready. The other components
// reconnect on their own.
func (c *Cluster) RestartAPIServer(ctx context.Context, extra ...string) error {
	c.apiServer.Stop(20 * time.Second)
	c.apiServerExtra = extra
	return c.startAPIServer(ctx)
}

// RestartKubelet stops the kubelet and starts it again with the same
// configuration (plugins must re-register).
func (c *Cluster) RestartKubelet(ctx context.Context) error {
	c.kubelet.Stop(20 * time.Second)
	return c.startKubelet(ctx)
}

func (c *Cluster) waitNodeReady(ctx context.Context) error {
	return c.waitFor(ctx, c.kubelet, 90*time.Second, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				for _, t := range n.Spec.Taints {
					if t.Key == "node.kubernetes.io/not-ready" {
						return errors.New("node is Ready but still carries the not-ready taint")
					}
				}
				return nil
			}
		}
		return errors.New("node not Ready yet")
	})
}

// waitHTTP polls a health URL until it answers 200 or p exits.
// WaitHTTP polls a plain-HTTP health URL until it answers 200, p (when
// not nil) exits, or 90 seconds pass.
func (c *Cluster) WaitHTTP(ctx context.Context, p *Process, url string) error {
	return c.waitHTTP(ctx, p, url, nil)
}

func (c *Cluster) waitHTTP(ctx context.Context, p *Process, url string, tlsCfg *tls.Config) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return c.waitFor(ctx, p, 90*time.Second, func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// WaitFor polls ok until it succeeds, p (when not nil) exits, or the
// timeout; the error then says which, with p's last log lines.
func (c *Cluster) WaitFor(ctx context.Context, p *Process, timeout time.Duration, ok func() error) error {
	return c.waitFor(ctx, p, timeout, ok)
}

// waitFor polls ok until it succeeds, the process (when not nil) exits, or
// the timeout. Polling is how one waits for another process's readiness.
func (c *Cluster) waitFor(ctx context.Context, p *Process, timeout time.Duration, ok func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = ok(); last == nil {
			return nil
		}
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v); last log lines:\n%s", p.name, err, p.Tail(20))
		}
		if time.Now().After(deadline) {
			if p == nil {
				return fmt.Errorf("not ready after %s: %v", timeout, last)
			}
			return fmt.Errorf("%s not ready after %s: %v; last log lines:\n%s", p.name, timeout, last, p.Tail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Down stops every process (newest first) and removes the kubelet's
// mounts, the pods' cgroups, the CNI bridge and the run directory's
// runtime state. The run directory itself (logs) is kept.
func (c *Cluster) Down() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].name == "containerd" {
			killTasks(c.Dir)
		}
		c.procs[i].Stop(15 * time.Second)
	}
	_ = os.Remove(filepath.Join(c.Dir, "pids"))
	cleanupHost(c.Dir)
}

// RemoveRunDir deletes the run's directory, logs included, when Up made it
// (Config.Dir empty); call it after Down once nothing needs the logs (a
// passing run). A directory the caller chose is left alone.
func (c *Cluster) RemoveRunDir() error {
	if c.cfg.Dir != "" {
		return nil
	}
	return os.RemoveAll(c.Dir)
}

// killTasks kills and deletes every container task of the run's containerd
// (the kubelet is already stopped, so nothing restarts them); their shims
// exit with them.
func killTasks(dir string) {
	bin, err := os.ReadFile(filepath.Join(dir, "bin"))
	if err != nil {
		return
	}
	ctr := filepath.Join(strings.TrimSpace(string(bin)), "ctr")
	sock := filepath.Join(dir, "ctd", "containerd.sock")
	out, err := exec.Command(ctr, "--address", sock, "-n", "k8s.io", "tasks", "ls", "-q").Output()
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command(ctr, "--address", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).Run()
		_ = exec.Command(ctr, "--address", sock, "-n", "k8s.io", "tasks", "delete", "-f", id).Run()
	}
}

// DownRecorded ends a detached cluster from another process: the process
// groups recorded in dir, then what the node left on the host.
func DownRecorded(dir string) error {
	err := StopRecorded(dir, 15*time.Second)
	cleanupHost(dir)
	return err
}

// cleanupHost removes what the node of the run in dir left on the host.
func cleanupHost(dir string) {
	// Any process still naming the run directory (a shim whose task
	// outlived containerd).
	if procs, err := os.ReadDir("/proc"); err == nil {
		for _, p := range procs {
			pid, err := strconv.Atoi(p.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline")); err == nil && strings.Contains(string(b), dir+"/") {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// Mounts below the run directory (kubelet volumes, containerd
	// snapshots, netns), deepest first.
	if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				mounts = append(mounts, f[1])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "bridge")); err == nil {
		_ = exec.Command("ip", "link", "delete", strings.TrimSpace(string(b))).Run()
	}
	// Pod cgroups the kubelet created (cgroupfs driver: kubepods).
	for _, base := range []string{"/sys/fs/cgroup"} {
		_ = filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if filepath.Base(path) == "kubepods" {
				removeCgroupTree(path)
				return filepath.SkipDir
			}
			if strings.Count(strings.TrimPrefix(path, base), "/") > 2 {
				return filepath.SkipDir
			}
			return nil
		})
	}
	_ = os.RemoveAll(filepath.Join(dir, "ctd"))
	_ = os.RemoveAll(filepath.Join(dir, "kubelet"))
}

// removeCgroupTree removes empty cgroup directories bottom-up.
func removeCgroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}
