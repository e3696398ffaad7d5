package deviceplugin

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestEndpointName(t *testing.T) {
	const name = "af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs"
	// The kubelet's directory leaves room for the readable name.
	if got, want := endpointName("/var/lib/kubelet/device-plugins", "fpga.intel.com", name), "fpga.intel.com-"+name+".sock"; got != want {
		t.Errorf("endpointName = %q, want %q", got, want)
	}
	// A deep directory gets a hashed name that fits a unix socket path.
	dir := "/" + strings.Repeat("d", 60)
	got := endpointName(dir, "fpga.intel.com", name)
	if p := filepath.Join(dir, got); len(p) > maxSocketPath || !strings.HasPrefix(got, "fpga.intel.com-") || strings.Contains(got, name) {
		t.Errorf("endpointName in a deep directory = %q (path %d bytes), want a short hashed name", got, len(p))
	}
	if other := endpointName(dir, "fpga.intel.com", name+"x"); other == got {
		t.Errorf("two resources share the socket name %q", got)
	}
}
