// Command demo runs the README's first command: a real local Kubernetes
// cluster with the FPGA DRA driver on a simulated FPGA node, a local OCI
// registry holding the sample bitstream, a workload that asks for an
// accelerator function that must first be programmed from that registry,
// and what each step produced. The cluster and the registry stay up; "demo
// down" ends them.
//
//	go run ./test/e2e/demo up --bin DIR --registry FILE [--dir /tmp/fdra-demo] [--since UNIX]
//	go run ./test/e2e/demo down [--dir /tmp/fdra-demo]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demo up --bin DIR --registry FILE [--dir DIR] [--since UNIX] | demo down [--dir DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "/tmp/fdra-demo", "run directory (kept short: unix socket paths are limited)")
	bin := fs.String("bin", "", "directory with the cluster binaries (hack/e2e/build-cluster-binaries.sh prints it)")
	registry := fs.String("registry", "", "the CNCF Distribution registry binary (hack/e2e/build-registry.sh prints it)")
	since := fs.Int64("since", 0, "when make demo started, in Unix `seconds`: the demo reports its whole time from it (default: this program's start)")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "up":
		p := &progress{since: time.Now()}
		if *since > 0 {
			p.since, p.fromMake = time.Unix(*since, 0), true
		}
		err = up(p, *dir, *bin, *registry)
	case "down":
		err = localcluster.DownRecorded(*dir)
		if err == nil {
			fmt.Printf("demo cluster in %s stopped\n", *dir)
		}
	default:
		err = fmt.Errorf("unknown subcommand %q: use up or down", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// progress numbers the demo's steps, announces each as it starts and says
// how long it took when the next one starts or the demo ends.
type progress struct {
	// since is when the demo started: when make demo started if fromMake.
	since    time.Time
	fromMake bool
	n        int
	start    time.Time
}

func (p *progress) step(format string, args ...any) {
	p.done()
	p.n++
	p.start = time.Now()
	fmt.Printf("\n==> %d. %s\n", p.n, fmt.Sprintf(format, args...))
}

// done reports the time of the current step, if one runs.
func (p *progress) done() {
	if p.n > 0 {
		fmt.Printf("    (step %d done in %s)\n", p.n, time.Since(p.start).Round(100*time.Millisecond))
	}
}

// finish reports the last step's time and the whole demo's.
func (p *progress) finish() {
	p.done()
	if p.fromMake {
		fmt.Printf("\nmake demo took %s, builds included.\n", time.Since(p.since).Round(time.Second))
		return
	}
	fmt.Printf("\nThe demo took %s.\n", time.Since(p.since).Round(time.Second))
}

func up(p *progress, dir, bin, registryBin string) error {
	if bin == "" {
		return errors.New("--bin is required: the directory hack/e2e/build-cluster-binaries.sh printed")
	}
	if registryBin == "" {
		return errors.New("--registry is required: the registry binary hack/e2e/build-registry.sh printed")
	}
	if _, err := os.Stat(filepath.Join(dir, "pids")); err == nil {
		return fmt.Errorf("a demo cluster already runs in %s: `make demo-down` first", dir)
	}
	_ = os.RemoveAll(dir)
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	st, err := startNode(ctx, p, repo, dir, bin, registryBin)
	if err != nil {
		return err
	}
	c, n, host, sample := st.c, st.n, st.host, st.sample
	p.step("The ResourceSlice the driver published (one device per FPGA port)")
	if err := printSlice(ctx, c); err != nil {
		return err
	}

	p.step("A DeviceClass for FPGA regions with interface %s, and a workload whose claim asks for AFU %s (loaded nowhere yet) from the registry, pinned by digest", simnode.DefaultInterfaceID, simnode.SampleAFUID)
	if err := applyWorkload(ctx, c, sample.ref); err != nil {
		return err
	}
	pod, err := c.WaitPodRunning(ctx, "demo", "accelerated", 120*time.Second)
	if err != nil {
		return err
	}
	claim, device, err := allocation(ctx, c, pod)
	if err != nil {
		return err
	}
	p.step("The scheduler allocated claim %s: device %s (pool %s)", claim.Name, device, c.NodeName)

	p.step("The driver pulled the bitstream, verified it and programmed the region before the container started")
	if err := printProgramming(ctx, c, n, claim, device, sample); err != nil {
		return err
	}

	p.step("What the container sees (printed by the container itself)")
	if err := printContainerView(ctx, c, pod); err != nil {
		return err
	}
	p.finish()

	fmt.Printf("\nThe cluster stays up. Try:\n    export KUBECONFIG=%s; %s get resourceslices,resourceclaims,pods -A\n", c.AdminKubeconfig, filepath.Join(bin, "kubectl"))
	fmt.Printf("    %s bitstream inspect --insecure-registries %s %s\n", n.Bin, host, sample.ref)
	fmt.Println("End it with: make demo-down")
	return nil
}

// started is what startNode brought up.
type started struct {
	c *localcluster.Cluster
	n *localcluster.FPGANode
	// host is the registry's host:port.
	host   string
	sample pushed
}

// startNode starts the local cluster, the registry holding the sample
// bitstream and the driver on a simulated node (from the Helm chart when
// `make images` built the image).
func startNode(ctx context.Context, p *progress, repo, dir, bin, registryBin string) (started, error) {
	p.step("Starting a local cluster: etcd, kube-apiserver, kube-scheduler, kube-controller-manager, containerd (CDI on), kubelet; then the driver as a host process on a simulated node")
	c, err := localcluster.Up(ctx, localcluster.Config{BinDir: bin, Repo: repo, Dir: dir, Detach: true,
		Logf: func(f string, a ...any) { fmt.Printf("    %s\n", fmt.Sprintf(f, a...)) }})
	if err != nil {
		return started{}, err
	}
	n, err := c.StartFPGANode(ctx)
	if err != nil {
		return started{}, fmt.Errorf("%w (logs in %s)", err, c.LogDir)
	}
	p.step("Starting a local OCI registry (CNCF Distribution) and pushing the sample bitstream with the admin CLI")
	host, err := c.StartRegistry(ctx, registryBin)
	if err != nil {
		return started{}, fmt.Errorf("%w (logs in %s)", err, c.LogDir)
	}
	sample, err := pushSample(ctx, n, host, filepath.Join(dir, "push"))
	if err != nil {
		return started{}, err
	}
	// The registry speaks plain HTTP, which the node allows only for
	// registries it lists.
	n.UseRegistry(localcluster.RegistryAccess{Insecure: []string{host}})
	if archive, ref, ok := localcluster.ChartImage(repo); ok {
		p.step("Installing fpga-dra-driver from its Helm chart (%s): the node daemon on a simulated node of 4 DFL cards with simulated partial reconfiguration, allowed plain HTTP to %s, and the controller", ref, host)
		n.Stop()
		n.UseChart(archive, ref)
		if err := n.Start(ctx); err != nil {
			return started{}, fmt.Errorf("%w (logs in %s)", err, c.LogDir)
		}
	} else {
		p.step("fpga-dra-driver runs as a host process on a simulated node of 4 DFL cards, allowed plain HTTP to %s (no image: `make images` for the Helm chart)", host)
		if err := n.Reconfigure(ctx); err != nil {
			return started{}, fmt.Errorf("%w (logs in %s)", err, c.LogDir)
		}
	}
	return started{c: c, n: n, host: host, sample: sample}, nil
}

// printProgramming shows the claim's events and the slice's new afuID of
// device, and where the node cached the bitstream.
func printProgramming(ctx context.Context, c *localcluster.Cluster, n *localcluster.FPGANode, claim *resourceapi.ResourceClaim, device string, sample pushed) error {
	events, err := c.Client.EventsV1().Events("demo").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, e := range events.Items {
		if e.Regarding.UID == claim.UID {
			fmt.Printf("    event %s: %s\n", e.Reason, e.Note)
		}
	}
	fmt.Printf("    slice now says %s has afuID %s\n", device, waitSliceAFU(ctx, c, device, simnode.SampleAFUID))
	if _, err := os.Stat(filepath.Join(n.CacheDir, "blobs", sample.layer)); err == nil {
		fmt.Printf("    the node keeps it in its cache for the next claims: %s\n", filepath.Join(n.CacheDir, "blobs", sample.layer))
	}
	return nil
}

// printContainerView shows the FPGA device nodes and environment the probe
// container reported.
func printContainerView(ctx context.Context, c *localcluster.Cluster, pod *corev1.Pod) error {
	view, err := c.ReadProbe(ctx, pod, "probe", 30*time.Second)
	if err != nil {
		return err
	}
	var devs []string
	for d, nums := range view.Devices {
		if strings.Contains(d, "fpga") || strings.Contains(d, "dfl") {
			devs = append(devs, fmt.Sprintf("%s (%s)", d, nums))
		}
	}
	sort.Strings(devs)
	fmt.Printf("    FPGA device nodes: %s\n", strings.Join(devs, ", "))
	var keys []string
	for k := range view.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("    %s=%s\n", k, view.Env[k])
	}
	return nil
}

func printSlice(ctx context.Context, c *localcluster.Cluster) error {
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, s := range list.Items {
		fmt.Printf("    %s (driver %s, node %s)\n", s.Name, s.Spec.Driver, ptr.Deref(s.Spec.NodeName, ""))
		for _, d := range s.Spec.Devices {
			str := func(k string) string {
				if v := d.Attributes[resourceapi.QualifiedName(localcluster.DriverName+"/"+k)].StringValue; v != nil {
					return *v
				}
				return "-"
			}
			fmt.Printf("      %-22s interfaceID=%s afuID=%s model=%q\n", d.Name, str("interfaceID"), str("afuID"), str("model"))
		}
	}
	return nil
}

// pushed is what the admin CLI reported about the sample bitstream.
type pushed struct {
	// ref is the reference pinned by the manifest's digest.
	ref string
	// layer is the layer's digest path below a cache's blobs directory
	// (sha256/<hex>).
	layer string
}

// pushSample writes the sample bitstream (the function SampleAFUID for the
// simulated region) into dir and pushes it to the registry at host with
// `fpga-dra-driver bitstream push`, showing the command and what it printed.
func pushSample(ctx context.Context, n *localcluster.FPGANode, host, dir string) (pushed, error) {
	files, err := program.WriteSimRepository(dir, simnode.DefaultInterfaceID, []string{simnode.SampleAFUID})
	if err != nil {
		return pushed{}, err
	}
	args := []string{"bitstream", "push", "--insecure-registries", host, files[0], host + "/fpga/sample-accelerator:v1"}
	fmt.Printf("    $ fpga-dra-driver %s\n", strings.Join(args, " "))
	out, err := exec.CommandContext(ctx, n.Bin, args...).CombinedOutput()
	if err != nil {
		return pushed{}, fmt.Errorf("bitstream push: %w: %s", err, out)
	}
	var p pushed
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fmt.Printf("    %s\n", line)
		if v, ok := strings.CutPrefix(line, "REFERENCE "); ok {
			p.ref = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "LAYER DIGEST "); ok {
			p.layer = strings.Replace(strings.TrimSpace(v), ":", "/", 1)
		}
	}
	if p.ref == "" || p.layer == "" {
		return pushed{}, fmt.Errorf("bitstream push printed no REFERENCE and LAYER DIGEST: %s", out)
	}
	return p, nil
}

func applyWorkload(ctx context.Context, c *localcluster.Cluster, bitstreamRef string) error {
	cfg, err := json.Marshal(v1alpha1.FpgaConfig{
		TypeMeta:     metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.FpgaConfigKind},
		AFUID:        simnode.SampleAFUID,
		BitstreamRef: bitstreamRef,
	})
	if err != nil {
		return err
	}
	expr := fmt.Sprintf(`device.driver == %q && device.attributes[%q].interfaceID == %q && device.attributes[%q].programmable`,
		localcluster.DriverName, localcluster.DriverName, simnode.DefaultInterfaceID, localcluster.DriverName)
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "fpga-region-pac-a10"},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	fmt.Printf("    DeviceClass fpga-region-pac-a10: %s\n", expr)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().ServiceAccounts("demo").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates("demo").Create(ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "sample-accelerator"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "fpga", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "fpga-region-pac-a10"}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: localcluster.DriverName, Parameters: runtime.RawExtension{Raw: cfg}},
			}}},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	fmt.Printf("    ResourceClaimTemplate demo/sample-accelerator with opaque config %s\n", cfg)
	_, err = c.Client.CoreV1().Pods("demo").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "accelerated"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "fpga", ResourceClaimTemplateName: ptr.To("sample-accelerator")}},
			Containers: []corev1.Container{{
				Name: "probe", Image: localcluster.ProbeImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "fpga"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err == nil {
		fmt.Println("    Pod demo/accelerated, waiting for it to run ...")
	}
	return err
}

func allocation(ctx context.Context, c *localcluster.Cluster, pod *corev1.Pod) (*resourceapi.ResourceClaim, string, error) {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		claim, err := c.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return nil, "", err
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			return claim, r.Device, nil
		}
	}
	return nil, "", errors.New("the pod's claim is not allocated")
}

func waitSliceAFU(ctx context.Context, c *localcluster.Cluster, device, want string) string {
	deadline := time.Now().Add(30 * time.Second)
	got := ""
	for time.Now().Before(deadline) {
		list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, s := range list.Items {
				for _, d := range s.Spec.Devices {
					if v := d.Attributes[resourceapi.QualifiedName(localcluster.DriverName+"/afuID")].StringValue; d.Name == device && v != nil {
						got = *v
					}
				}
			}
		}
		if got == want {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	return got
}
