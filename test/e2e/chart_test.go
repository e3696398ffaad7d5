package e2e

import (
	"os"
	"path/filepath"
	"strings"
)

// chartImage finds the image archive `make images` wrote below repo and
// its reference (the chart's appVersion).
func chartImage(repo string) (archive, ref string, ok bool) {
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
