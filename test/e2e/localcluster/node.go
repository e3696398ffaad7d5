package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
