// Package autoscale proves that FPGA nodes scale from zero with a real
// autoscaler, on a local control plane (package localcluster): Karpenter
// core with its kwok cloud provider and DRA simulation on, whose FPGA
// instance types carry the devices package slicetemplate predicts
// (test/e2e/autoscale/provider); kwok's controller as the fake kubelets of
// the nodes Karpenter launches; and, for every such node, the driver in
// simulation mode as its DaemonSet would run it. Run with
// `make e2e-autoscale` (hack/e2e/build-autoscaler-binaries.sh builds
// Karpenter and kwok).
package autoscale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

var (
	env      *environment
	setupErr error
	logDir   string // the components' logs
)

// enabled: the suite runs under `make e2e-autoscale` only, not under
// `make e2e` (which sets FPGA_DRA_E2E but builds no autoscaler).
func enabled() bool {
	return os.Getenv("FPGA_DRA_E2E") == "1" && os.Getenv("FPGA_DRA_AUTOSCALER_BIN") != ""
}

func logf(format string, args ...any) {
	fmt.Printf("[e2e-autoscale %s] %s\n", time.Now().Format("15:04:05.0"), fmt.Sprintf(format, args...))
}

func TestMain(m *testing.M) {
	if !enabled() {
		os.Exit(m.Run()) // every test skips with the reason
	}
	code := 1
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		repo, err := filepath.Abs("../../..")
		if err != nil {
			setupErr = err
			return
		}
		var c *localcluster.Cluster
		c, setupErr = localcluster.Up(ctx, localcluster.Config{
			BinDir: os.Getenv("FPGA_DRA_CLUSTER_BIN"), Repo: repo, Logf: logf, ControlPlaneOnly: true,
		})
		if setupErr != nil {
			return
		}
		logDir = c.LogDir
		defer func() {
			if env != nil && env.agents != nil {
				env.agents.stop()
			}
			if os.Getenv("FPGA_DRA_E2E_KEEP") != "" {
				return
			}
			c.Down()
			if code == 0 && setupErr == nil {
				if err := c.RemoveRunDir(); err != nil {
					fmt.Fprintf(os.Stderr, "remove the run directory: %v\n", err)
				}
			}
		}()
		env, setupErr = start(ctx, c, repo, os.Getenv("FPGA_DRA_AUTOSCALER_BIN"))
		if setupErr != nil {
			return
		}
		code = m.Run()
		if code != 0 {
			fmt.Printf("e2e-autoscale: component logs are in %s\n", c.LogDir)
		}
	}()
	if setupErr != nil {
		fmt.Fprintf(os.Stderr, "e2e-autoscale setup failed: %v\n", setupErr)
		if logDir != "" {
			fmt.Fprintf(os.Stderr, "component logs: %s\n", logDir)
		}
	}
	os.Exit(code)
}

func requireEnvironment(t *testing.T) {
	t.Helper()
	if !enabled() {
		t.Skip("end-to-end autoscaling test: needs a local control plane, Karpenter and kwok; run `make e2e-autoscale`")
	}
	if setupErr != nil {
		t.Fatalf("setup failed: %v", setupErr)
	}
}
