package deviceplugin_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
)

// TestWriteHookSpec: a runtime that resolves the hook's CDI device gets a
// createRuntime hook running `fpga-dra-driver hook` with the control
// socket, and nothing else.
func TestWriteHookSpec(t *testing.T) {
	dir := t.TempDir()
	h := deviceplugin.HookSpec{Vendor: cdiVendor, Dir: dir, Binary: "/opt/fpga-dra/bin/fpga-dra-driver", ControlSocket: "/var/lib/kubelet/plugins/fpga.dra.dev/control.sock"}
	name, err := deviceplugin.WriteHookSpec(h)
	if err != nil {
		t.Fatal(err)
	}
	if name != cdiVendor+"/hook=program" {
		t.Errorf("device %q, want %s/hook=program", name, cdiVendor)
	}
	// Writing again (a daemon restart) replaces the spec.
	if _, err := deviceplugin.WriteHookSpec(h); err != nil {
		t.Fatal(err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, name); err != nil {
		t.Fatalf("inject %s: %v (unresolved %v)", name, err, unresolved)
	}
	want := &oci.Hooks{CreateRuntime: []oci.Hook{{
		Path: h.Binary,
		Args: []string{"fpga-dra-driver", "hook", "--control-socket", h.ControlSocket},
	}}}
	if diff := cmp.Diff(want, spec.Hooks); diff != "" {
		t.Errorf("hooks after injection (-want +got):\n%s", diff)
	}
	if len(spec.Linux.Devices) != 0 || len(spec.Process.Env) != 0 {
		t.Errorf("the hook device added devices %v or env %v", spec.Linux.Devices, spec.Process.Env)
	}
}

func TestWriteHookSpecRejects(t *testing.T) {
	for _, h := range []deviceplugin.HookSpec{
		{Vendor: "not a vendor", Dir: t.TempDir(), Binary: "/bin/x", ControlSocket: "/run/c.sock"},
		{Vendor: cdiVendor, Binary: "/bin/x", ControlSocket: "/run/c.sock"},
		{Vendor: cdiVendor, Dir: t.TempDir(), Binary: "fpga-dra-driver", ControlSocket: "/run/c.sock"},
		{Vendor: cdiVendor, Dir: t.TempDir(), Binary: "/bin/x", ControlSocket: "c.sock"},
	} {
		if _, err := deviceplugin.WriteHookSpec(h); err == nil {
			t.Errorf("WriteHookSpec(%+v) succeeded, want an error", h)
		}
	}
}
