package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// chartImage finds the image archive `make images` wrote and its reference.
func chartImage(t *testing.T) (archive, ref string) {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	archives, _ := filepath.Glob(filepath.Join(repo, "_output/images/fpga-dra-driver-*-linux-*.tar"))
	if len(archives) == 0 {
		t.Fatal("no image archive in _output/images: run `make images` (make e2e does)")
	}
	b, err := os.ReadFile(filepath.Join(repo, "deployments/helm/fpga-dra-driver/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var version string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "appVersion:"); ok {
			version = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return archives[0], "ghcr.io/fpga-dra/fpga-dra-driver:" + version
}

// Test0Chart installs the driver and the controller from the Helm chart,
// as users do, from the locally built image, with the simulated node and
// programmer selected through chart values; a pod then gets a loaded AFU
// and another a region the driver programs.
func Test0Chart(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	archive, ref := chartImage(t)
	node.Stop() // the host-process driver; restarted afterwards
	t.Cleanup(func() {
		if err := node.Start(context.Background()); err != nil {
			t.Errorf("restart the host-process driver: %v", err)
		}
	})
	chart, err := cluster.InstallChart(ctx, node, archive, ref)
	if chart != nil {
		t.Cleanup(func() {
			if err := chart.Uninstall(context.Background()); err != nil {
				t.Errorf("uninstall: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("%v (logs in %s)", err, cluster.LogDir)
	}
	ns := namespace(t, "e2e-chart")
	deviceClass(t, "e2e-chart-af", fmt.Sprintf("%s.afuID == %q", attrs, simnode.SecondAFUID))
	deviceClass(t, "e2e-chart-region", fmt.Sprintf("%s.interfaceID == %q && %s.programmable && %s.afuID != %q", attrs, simnode.DefaultInterfaceID, attrs, attrs, simnode.SecondAFUID))
	claimTemplate(t, ns, "af", "e2e-chart-af", nil)
	claimTemplate(t, ns, "program", "e2e-chart-region", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.SampleAFUID, Programming: v1alpha1.ProgrammingAlways})))
	probePod(t, ns, "af", "af")
	view, device, _ := runningProbe(t, ns, "af")
	if got, want := fpgaDevices(view), []string{"/dev/" + portOf(t, device).Name}; !slices.Equal(got, want) {
		t.Fatalf("container sees %v, want exactly %v", got, want)
	}
	probePod(t, ns, "program", "program")
	view, device, claim := runningProbe(t, ns, "program")
	if view.Env["FPGA_AFU_IDS"] != simnode.SampleAFUID {
		t.Fatalf("container sees AFU %q, want the programmed %s", view.Env["FPGA_AFU_IDS"], simnode.SampleAFUID)
	}
	eventually(t, "Programmed event from the chart's driver", 30*time.Second, func() bool { return programmedEvents(t, claim) == 1 })
	eventually(t, "slice afuID republished", 30*time.Second, func() bool { return sliceAFU(ctx, device) == simnode.SampleAFUID })
}
