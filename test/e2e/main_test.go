// Package e2e runs the driver against a real local Kubernetes cluster (see
// localcluster): a real API server, scheduler, controller manager, kubelet
// and containerd with CDI, and the driver on a simulated FPGA node with the
// simulated programmer. Run with `make e2e` (FPGA_DRA_E2E=1).
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

const driverName = "fpga.dra.dev"

var (
	cluster  *localcluster.Cluster
	node     *localcluster.FPGANode
	setupErr error
)

func enabled() bool { return os.Getenv("FPGA_DRA_E2E") == "1" }

func TestMain(m *testing.M) {
	if !enabled() {
		os.Exit(m.Run()) // every test skips with the reason
	}
	code := 1
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		repo, err := filepath.Abs("../..")
		if err != nil {
			setupErr = err
			return
		}
		logf := func(format string, args ...any) {
			fmt.Printf("[e2e %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
		cluster, setupErr = localcluster.Up(ctx, localcluster.Config{BinDir: os.Getenv("FPGA_DRA_CLUSTER_BIN"), Repo: repo, Logf: logf})
		if setupErr != nil {
			return
		}
		defer func() {
			if os.Getenv("FPGA_DRA_E2E_KEEP") == "" {
				cluster.Down()
				// A passing run's directory (some 100 MB: etcd, the
				// simulated node, images) is not needed; a failing run's
				// keeps the component logs.
				if code == 0 && setupErr == nil {
					if err := cluster.RemoveRunDir(); err != nil {
						fmt.Fprintf(os.Stderr, "remove the run directory: %v\n", err)
					}
				}
			}
		}()
		node, setupErr = cluster.StartFPGANode(ctx)
		if setupErr != nil {
			return
		}
		// With the image `make images` built, the suite runs the driver
		// and the controller as users do: installed from the Helm chart.
		if archive, ref, ok := localcluster.ChartImage(repo); ok {
			logf("installing the driver from the Helm chart with %s (%s)", ref, archive)
			node.Stop()
			node.UseChart(archive, ref)
			if setupErr = node.Start(ctx); setupErr != nil {
				return
			}
		} else {
			logf("no image in _output/images (make images): the driver runs as a host process")
		}
		code = m.Run()
		if code != 0 {
			fmt.Printf("e2e: component logs are in %s\n", cluster.LogDir)
		}
	}()
	if setupErr != nil {
		fmt.Fprintf(os.Stderr, "e2e setup failed: %v\n", setupErr)
		if cluster != nil {
			fmt.Fprintf(os.Stderr, "component logs: %s\n", cluster.LogDir)
		}
	}
	os.Exit(code)
}

// requireCluster skips without a cluster (with the reason) and fails when
// the cluster could not be set up.
func requireCluster(t testing.TB) {
	t.Helper()
	if !enabled() {
		t.Skip("end-to-end test: needs a local cluster; run `make e2e` (FPGA_DRA_E2E=1 with the binaries from hack/e2e/build-cluster-binaries.sh)")
	}
	if setupErr != nil {
		t.Fatalf("cluster setup failed: %v", setupErr)
	}
}

func nodeSlices(ctx context.Context) ([]resourceapi.ResourceSlice, error) {
	list, err := cluster.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + cluster.NodeName})
	if err != nil {
		return nil, err
	}
	var out []resourceapi.ResourceSlice
	for _, s := range list.Items {
		if s.Spec.Driver == driverName {
			out = append(out, s)
		}
	}
	return out, nil
}

// namespace creates a namespace with its default service account.
func namespace(t testing.TB, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Wait until the namespace is gone: its pods' claims are then
		// unprepared and deallocated, and the next test finds every device
		// free.
		ctx := context.Background()
		_ = cluster.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if _, err := cluster.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(250 * time.Millisecond) // polling the API server for another component's work
		}
		t.Errorf("namespace %s not deleted within 2 minutes", name)
	})
	return name
}
