package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
)

// ChartNamespace is where InstallChart installs the chart.
const ChartNamespace = "fpga-dra-driver"

// Chart is the project's Helm chart installed the way users install it,
// rendered with values for this cluster: the node daemon as a DaemonSet
// pod on the simulated node of n, the controller as a Deployment.
type Chart struct {
	c        *Cluster
	rendered string
	// values is the file of the values for this cluster; the registry
	// access and the bitstream cache are rendered on top of them, then
	// override (UpgradeChart) when set.
	values, override string
	// imageRef is the image the release runs.
	imageRef string
}

// HookDir is the host directory the chart installs the region programming
// hook into.
func (c *Cluster) HookDir() string { return filepath.Join(c.Dir, "hook") }

// InstallChart imports the image archive into containerd, renders the
// chart with helm (hack/helm.sh) and applies it, then waits until the
// daemon's pod registered with the kubelet and published its slice. The
// pods run in the host network namespace and reach the API server on
// 127.0.0.1 (this cluster has no kube-proxy for the kubernetes Service).
func (c *Cluster) InstallChart(ctx context.Context, n *FPGANode, imageArchive, imageRef string) (*Chart, error) {
	ctr := exec.CommandContext(ctx, c.bin("ctr"), "--address", c.containerdSock, "-n", "k8s.io", "images", "import", "--all-platforms", imageArchive)
	if b, err := ctr.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("import %s: %w\n%s", imageArchive, err, b)
	}
	repo, tag, _ := strings.Cut(imageRef, ":")
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	apiPort := strings.TrimPrefix(c.Server, "https://127.0.0.1:")
	env := fmt.Sprintf(`
    - {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
    - {name: KUBERNETES_SERVICE_PORT, value: %q}`, apiPort)
	values := fmt.Sprintf(`image:
  repository: %s
  tag: %q
  pullPolicy: Never
kubeletPlugin:
  hostNetwork: true
  kubeletDir: %s
  cdiDir: %s
  bitstreamDir: %s
  healthcheckPort: %d
  metricsPort: %d
  hook:
    install: true
    hostDir: %s
  xrt:
    # Not used by the simulated programmer: the host's / mounted as an
    # Alveo node has it, so every run shows the daemon starts with it.
    hostRoot: /host
  simulation:
    enabled: true
    dir: %s
    writeNode: false
    programDelay: 1s
    programDelays: {%s: %s}
  extraArgs: ["--refresh-interval=2s"]
  extraEnv:%s
    - {name: UEVENT_SOURCE, value: "unix:%s"}
controller:
  # One node, host network: a second replica would find its ports taken.
  replicas: 1
  hostNetwork: true
  httpPort: %d
  webhook:
    enabled: false
  extraEnv:%s
`, repo, tag, c.KubeletRoot, c.CDIDir, filepath.Join(n.Root, "srv/fpga/bitstreams"), ports[0], ports[1], c.HookDir(), n.Root, SlowAFUID, SlowProgramming, env, n.uevents, ports[2], env)
	ch := &Chart{c: c, rendered: filepath.Join(c.Dir, "chart-rendered.yaml"), values: filepath.Join(c.Dir, "chart-values.yaml"), imageRef: imageRef}
	if err := os.WriteFile(ch.values, []byte(values), 0o644); err != nil {
		return nil, err
	}
	if err := ch.apply(ctx, n); err != nil {
		return nil, err
	}
	if err := ch.waitRegistered(ctx); err != nil {
		return ch, err
	}
	// The init container put the region programming hook on the host.
	if fi, err := os.Stat(filepath.Join(c.HookDir(), "fpga-dra-driver")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		return ch, fmt.Errorf("the chart's install-hook init container left no executable hook in %s (%v)", c.HookDir(), err)
	}
	return ch, nil
}

// apply renders the chart with the cluster's values and n's registry
// access, creates the namespace and the registry Secrets, and
// applies the rendering.
func (ch *Chart) apply(ctx context.Context, n *FPGANode) error {
	c := ch.c
	registry, err := n.registryValues()
	if err != nil {
		return err
	}
	registryFile := filepath.Join(c.Dir, "chart-values-registry.yaml")
	if err := os.WriteFile(registryFile, []byte(registry), 0o644); err != nil {
		return err
	}
	args := []string{"template", "fpga-dra-driver",
		filepath.Join(c.cfg.Repo, "deployments/helm/fpga-dra-driver"), "--namespace", ChartNamespace, "--include-crds", "--kube-version", "1.37.1",
		"-f", ch.values, "-f", registryFile}
	if ch.override != "" {
		args = append(args, "-f", ch.override)
	}
	helm := exec.CommandContext(ctx, filepath.Join(c.cfg.Repo, "hack/helm.sh"), args...)
	helm.Dir = c.cfg.Repo
	var stderr strings.Builder
	helm.Stderr = &stderr
	out, err := helm.Output()
	if err != nil {
		return fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	if err := os.WriteFile(ch.rendered, out, 0o644); err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ChartNamespace}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	if err := c.applyRegistrySecrets(ctx, n.registry); err != nil {
		return err
	}
	return c.kubectl(ctx, "apply", "--server-side", "-f", ch.rendered)
}

// upgrade applies the chart again with n's registry access, as `helm
// upgrade` would, waits until the DaemonSet has replaced the daemon's pod
// and the new one registered with the kubelet and published.
func (ch *Chart) upgrade(ctx context.Context, n *FPGANode) error {
	if err := ch.apply(ctx, n); err != nil {
		return err
	}
	return ch.rolledOut(ctx, n)
}

// rolledOut waits until the DaemonSet has replaced the daemon's pod and
// the new one registered with the kubelet and published.
func (ch *Chart) rolledOut(ctx context.Context, n *FPGANode) error {
	if err := ch.c.kubectl(ctx, "rollout", "status", "daemonset", "--namespace", ChartNamespace,
		"--selector", "app.kubernetes.io/component=kubeletplugin", "--timeout=120s"); err != nil {
		return fmt.Errorf("%w; pods: %s", err, ch.c.podSummary(ctx, ChartNamespace))
	}
	if err := ch.waitRegistered(ctx); err != nil {
		return err
	}
	return n.waitPublished(ctx, nil)
}

// UpgradeChart starts an upgrade of the chart release, as `helm upgrade`
// does: to the image tag (the running image tagged anew in containerd, so
// the DaemonSet rolls out a new pod; empty keeps the image) with values
// (YAML) on top of the cluster's (replacing an earlier upgrade's). It
// returns once the new manifests are applied; wait returns once the
// DaemonSet replaced the daemon's pod and the new one registered and
// published.
func (n *FPGANode) UpgradeChart(ctx context.Context, tag, values string) (wait func(context.Context) error, err error) {
	ch := n.chart
	if ch == nil {
		return nil, fmt.Errorf("the driver does not run from the chart")
	}
	c := ch.c
	if tag != "" {
		repo, _, _ := strings.Cut(ch.imageRef, ":")
		ref := repo + ":" + tag
		ctr := exec.CommandContext(ctx, c.bin("ctr"), "--address", c.containerdSock, "-n", "k8s.io", "images", "tag", "--force", ch.imageRef, ref)
		if b, err := ctr.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("tag %s as %s: %w\n%s", ch.imageRef, ref, err, b)
		}
		values = fmt.Sprintf("image: {tag: %q}\n%s", tag, values)
	}
	ch.override = filepath.Join(c.Dir, "chart-values-upgrade.yaml")
	if err := os.WriteFile(ch.override, []byte(values), 0o644); err != nil {
		return nil, err
	}
	if err := ch.apply(ctx, n); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return ch.rolledOut(ctx, n) }, nil
}

// waitRegistered waits until the daemon's pod registered with the kubelet
// (its control socket is on the host, below the kubelet's directory).
func (ch *Chart) waitRegistered(ctx context.Context) error {
	c := ch.c
	ctl := adminapi.NewClient(filepath.Join(c.KubeletRoot, "plugins", DriverName, "control.sock"))
	deadline := time.Now().Add(120 * time.Second)
	for {
		list, err := ctl.List(ctx)
		if err == nil && list.Registered != nil && *list.Registered {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the chart's driver pod did not register within 120s (%v); pods: %s", err, c.podSummary(ctx, ChartNamespace))
		}
		time.Sleep(250 * time.Millisecond) // polling another process
	}
}

// Uninstall deletes what InstallChart applied and waits until the
// daemon's pod is gone.
func (ch *Chart) Uninstall(ctx context.Context) error {
	if err := ch.c.kubectl(ctx, "delete", "--wait=true", "--timeout=120s", "--ignore-not-found", "-f", ch.rendered); err != nil {
		return err
	}
	return ch.c.kubectl(ctx, "delete", "namespace", ChartNamespace, "--wait=true", "--timeout=120s", "--ignore-not-found")
}

// Kubectl runs the cluster's kubectl as admin; the error holds its output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) error { return c.kubectl(ctx, args...) }

func (c *Cluster) kubectl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), append([]string{"--kubeconfig", c.AdminKubeconfig}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// podSummary describes a namespace's pods and their last events, for
// error messages.
func (c *Cluster) podSummary(ctx context.Context, ns string) string {
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, fmt.Sprintf("%s %s [%s]", p.Name, p.Status.Phase, c.Events(ctx, ns, p.Name)))
	}
	return strings.Join(out, "; ")
}

// ChartImage finds the image archive `make images` wrote below repo and its
// reference (the chart's appVersion).
func ChartImage(repo string) (archive, ref string, ok bool) {
	archives, _ := filepath.Glob(filepath.Join(repo, "_output/images/fpga-dra-driver-*-linux-*.tar"))
	if len(archives) == 0 {
		return "", "", false
	}
	b, err := os.ReadFile(filepath.Join(repo, "deployments/helm/fpga-dra-driver/Chart.yaml"))
	if err != nil {
		return "", "", false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(l, "appVersion:"); found {
			return archives[0], "ghcr.io/fpga-dra/fpga-dra-driver:" + strings.Trim(strings.TrimSpace(v), `"`), true
		}
	}
	return "", "", false
}
