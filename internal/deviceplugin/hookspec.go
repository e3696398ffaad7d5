package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

// Names of the CDI device that carries the programming hook:
// "<vendor>/hook=program".
const (
	hookClass  = "hook"
	hookDevice = "program"
)

// HookSpec describes the programming hook for WriteHookSpec.
type HookSpec struct {
	// Vendor is the CDI vendor (the driver name, e.g. "fpga.dra.dev").
	Vendor string
	// Dir is the directory the container runtime reads CDI specs from.
	Dir string
	// Binary is this program's path as the container runtime on the host
	// sees it: the runtime, not the daemon's container, runs the hook.
	Binary string
	// ControlSocket is the daemon's control socket as the host sees it.
	ControlSocket string
}

// WriteHookSpec writes (atomically, validated by the CDI library's parser)
// the spec "<vendor>-hook.json" with one device, "<vendor>/hook=program",
// whose only edit is an OCI createRuntime hook running
//
//	<Binary> hook --control-socket <ControlSocket>
//
// and returns that device's qualified name. Region-mode allocations add
// the device to the container, so the hook programs the container's region
// before the container starts (see `fpga-dra-driver hook`). The hook gets
// the OCI state on stdin and nothing from the container but its
// environment: no bitstream path ever comes from the container.
func WriteHookSpec(h HookSpec) (string, error) {
	if err := parser.ValidateVendorName(h.Vendor); err != nil {
		return "", fmt.Errorf("CDI vendor %q: %w", h.Vendor, err)
	}
	switch {
	case h.Dir == "":
		return "", errors.New("CDI spec directory is empty: pass the directory the container runtime reads, e.g. /var/run/cdi")
	case !filepath.IsAbs(h.Binary):
		return "", fmt.Errorf("hook binary %q is not an absolute path: pass this program's path on the host", h.Binary)
	case !filepath.IsAbs(h.ControlSocket):
		return "", fmt.Errorf("control socket %q is not an absolute path", h.ControlSocket)
	}
	spec := &cdispec.Spec{
		Kind: h.Vendor + "/" + hookClass,
		Devices: []cdispec.Device{{
			Name: hookDevice,
			ContainerEdits: cdispec.ContainerEdits{
				Hooks: []*cdispec.Hook{{
					HookName: cdiapi.CreateRuntimeHook,
					Path:     h.Binary,
					Args:     []string{filepath.Base(h.Binary), "hook", "--control-socket", h.ControlSocket},
				}},
			},
		}},
	}
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return "", fmt.Errorf("CDI hook spec version: %w", err)
	}
	spec.Version = version
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode CDI hook spec: %w", err)
	}
	if err := os.MkdirAll(h.Dir, 0o755); err != nil {
		return "", fmt.Errorf("create CDI spec directory: %w", err)
	}
	path := filepath.Join(h.Dir, h.Vendor+"-"+hookClass+".json")
	check := func(tmp string) error {
		if _, err := cdiapi.ReadSpec(tmp, 0); err != nil {
			return fmt.Errorf("invalid CDI spec: %w", err)
		}
		return nil
	}
	if err := atomicfile.Write(path, append(data, '\n'), atomicfile.Options{Perm: 0o644, Check: check}); err != nil {
		return "", fmt.Errorf("write CDI hook spec: %w", err)
	}
	return parser.QualifiedName(h.Vendor, hookClass, hookDevice), nil
}
