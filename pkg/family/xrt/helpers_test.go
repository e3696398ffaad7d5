package xrt_test

import (
	"os"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func writeNode(t testing.TB, opts simnode.Options) *simnode.Node {
	t.Helper()
	n, err := simnode.Write(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("write simulated node: %v", err)
	}
	return n
}

func scan(t testing.TB, root string) *discovery.Result {
	t.Helper()
	res, err := (&discovery.Scanner{Root: root}).Scan()
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return res
}

// scanWith writes files (path -> content) and scans root.
func scanWith(t *testing.T, root string, files map[string]string) (*discovery.Result, error) {
	t.Helper()
	for path, v := range files {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return (&discovery.Scanner{Root: root}).Scan()
}
