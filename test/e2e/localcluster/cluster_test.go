package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestUpRunsPodsAndDown brings a cluster up, runs the probe image without
// any device, and checks that Down leaves no process behind.
func TestUpRunsPodsAndDown(t *testing.T) {
	if os.Getenv("FPGA_DRA_E2E") != "1" {
		t.Skip("starts a real cluster: run `make e2e` (FPGA_DRA_E2E=1 with the binaries from hack/e2e/build-cluster-binaries.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Up(ctx, Config{BinDir: os.Getenv("FPGA_DRA_CLUSTER_BIN"), Repo: repo, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	down := true
	defer func() {
		if down {
			c.Down()
		}
	}()
	ns := "framework"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Logf("service account: %v", err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "probe", Image: ProbeImage, ImagePullPolicy: corev1.PullNever}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.WaitPodRunning(ctx, ns, "probe", 90*time.Second)
	if err != nil {
		t.Fatalf("%v (logs in %s)", err, c.LogDir)
	}
	view, err := c.ReadProbe(ctx, pod, "probe", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := view.Devices["/dev/null"]; !ok {
		t.Errorf("probe saw no /dev/null: %v", view.Devices)
	}
	if len(view.Env) != 0 {
		t.Errorf("a pod without a claim has FPGA environment %v", view.Env)
	}
	pids := make([]int, 0, len(c.procs))
	for _, p := range c.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	down = false
	c.Down()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still runs after Down", pid)
		}
	}
	if !t.Failed() {
		if err := c.RemoveRunDir(); err != nil {
			t.Errorf("remove the run directory: %v", err)
		}
		if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
			t.Errorf("run directory %s left after RemoveRunDir: %v", c.Dir, err)
		}
	}
}
