package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Environment variables the Intel FPGA admission webhook (and its
// successor) set in a region-mode container: FPGA_REGION_<n> is the
// interface ID of the n-th region the container needs, FPGA_AFU_<n> the
// accelerator function to load into it.
const (
	envRegionPrefix = "FPGA_REGION_"
	envAFUPrefix    = "FPGA_AFU_"
)

func newHookCommand() *cobra.Command {
	var (
		socket  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "hook",
		Short: "OCI createRuntime hook: program the container's FPGA regions through the running daemon",
		Long: `Run by the container runtime (the region-mode CDI device adds it), with the
OCI state on stdin. Reads FPGA_REGION_<n>/FPGA_AFU_<n> from the container's
environment in <bundle>/config.json, pairs each with one of the container's
FPGA ports of that interface, and asks the daemon over its control socket to
load the AFU. Only the IDs go to the daemon, which finds the bitstream in its
own repository. Any failure fails the container start. A container without
FPGA_REGION_<n> variables is left alone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return runHook(ctx, cmd.InOrStdin(), adminapi.NewClient(socket))
		},
	}
	f := cmd.Flags()
	f.StringVar(&socket, "control-socket", defaultControlSocket(defaultPluginDir(v1alpha1.DriverName)), "the daemon's control socket")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for programming")
	flagenv.Twins(f, map[string]string{
		"control-socket": "CONTROL_SOCKET",
	})
	return cmd
}

// ociState is what a hook reads on stdin (OCI runtime spec, "State").
type ociState struct {
	OCIVersion  string            `json:"ociVersion"`
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Pid         int               `json:"pid,omitempty"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ociConfig is the part of <bundle>/config.json the hook reads.
type ociConfig struct {
	Process *struct {
		Env []string `json:"env"`
	} `json:"process"`
	Linux *struct {
		Devices []ociDevice `json:"devices"`
	} `json:"linux"`
}

type ociDevice struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
}

// regionRequest is one FPGA_REGION_<n>/FPGA_AFU_<n> pair.
type regionRequest struct {
	n                  int
	interfaceID, afuID string
}

// runHook programs the regions a container asks for. See newHookCommand.
func runHook(ctx context.Context, stdin io.Reader, client *adminapi.Client) error {
	var st ociState
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&st); err != nil {
		return fmt.Errorf("fpga-dra-driver hook: read the OCI state from stdin: %w (run this as an OCI createRuntime hook)", err)
	}
	if st.Bundle == "" {
		return fmt.Errorf("fpga-dra-driver hook: container %q: the OCI state on stdin has no bundle", st.ID)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("fpga-dra-driver hook: container %s: %s", st.ID, fmt.Sprintf(format, args...))
	}
	cfg, err := readOCIConfig(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return fail("%v", err)
	}
	var env []string
	if cfg.Process != nil {
		env = cfg.Process.Env
	}
	regions, err := regionRequests(env)
	if err != nil {
		return fail("%v", err)
	}
	if len(regions) == 0 {
		return nil
	}
	list, err := client.List(ctx)
	if err != nil {
		return fail("list the node's FPGA ports: %v", err)
	}
	var devices []ociDevice
	if cfg.Linux != nil {
		devices = cfg.Linux.Devices
	}
	ports := containerPorts(devices, list.Devices)
	used := make([]bool, len(ports))
	for _, r := range regions {
		i := -1
		for j, p := range ports {
			if !used[j] && p.InterfaceID == r.interfaceID {
				i = j
				break
			}
		}
		if i < 0 {
			return fail("%s%d=%s: %s", envRegionPrefix, r.n, r.interfaceID, noPortFor(r, ports, used))
		}
		used[i] = true
		_, err := client.Program(ctx, adminapi.ProgramRequest{Device: ports[i].Node, InterfaceID: r.interfaceID, AFUID: r.afuID})
		if err != nil {
			return fail("load %s%d=%s into %s (%s%d=%s): %v", envAFUPrefix, r.n, r.afuID, ports[i].Node, envRegionPrefix, r.n, r.interfaceID, err)
		}
	}
	return nil
}

func readOCIConfig(path string) (*ociConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the container's OCI config: %w", err)
	}
	defer f.Close()
	var cfg ociConfig
	if err := json.NewDecoder(io.LimitReader(f, 64<<20)).Decode(&cfg); err != nil {
		return nil, fmt.Errorf("decode the container's OCI config %s: %w", path, err)
	}
	return &cfg, nil
}

// regionRequests collects the FPGA_REGION_<n>/FPGA_AFU_<n> pairs of env,
// ordered by n, with canonical IDs. Every region needs its AFU and the
// other way round; a later value of a variable wins, as in a process
// environment.
func regionRequests(env []string) ([]regionRequest, error) {
	regions, afus := map[int]string{}, map[int]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		var m map[int]string
		var suffix string
		switch {
		case strings.HasPrefix(k, envRegionPrefix):
			m, suffix = regions, k[len(envRegionPrefix):]
		case strings.HasPrefix(k, envAFUPrefix):
			m, suffix = afus, k[len(envAFUPrefix):]
		default:
			continue
		}
		n, err := strconv.Atoi(suffix)
		if err != nil || n < 0 || strconv.Itoa(n) != suffix {
			continue // FPGA_AFU_IDS and friends, not an indexed pair
		}
		m[n] = v
	}
	var out []regionRequest
	for n, region := range regions {
		afu, ok := afus[n]
		if !ok {
			return nil, fmt.Errorf("%s%d is set but %s%d is not: set both (one pair per region)", envRegionPrefix, n, envAFUPrefix, n)
		}
		ifID, err := discovery.CanonicalID(region)
		if err != nil {
			return nil, fmt.Errorf("%s%d: %w", envRegionPrefix, n, err)
		}
		afuID, err := discovery.CanonicalID(afu)
		if err != nil {
			return nil, fmt.Errorf("%s%d: %w", envAFUPrefix, n, err)
		}
		out = append(out, regionRequest{n: n, interfaceID: ifID, afuID: afuID})
	}
	for n := range afus {
		if _, ok := regions[n]; !ok {
			return nil, fmt.Errorf("%s%d is set but %s%d is not: set both (one pair per region)", envAFUPrefix, n, envRegionPrefix, n)
		}
	}
	slices.SortFunc(out, func(a, b regionRequest) int { return a.n - b.n })
	return out, nil
}

// containerPorts returns the node's FPGA ports the container was given, in
// the order of its device list: a character device matches a port by
// major:minor when it has them, else by path. Device numbers are per type:
// a block device (a raw-block volume) with a port's numbers is not it.
func containerPorts(devices []ociDevice, node []adminapi.Device) []adminapi.Device {
	var out []adminapi.Device
	for _, d := range devices {
		if d.Type != "c" && d.Type != "u" {
			continue
		}
		i := slices.IndexFunc(node, func(p adminapi.Device) bool {
			if d.Major != 0 || d.Minor != 0 {
				return int64(p.Major) == d.Major && int64(p.Minor) == d.Minor
			}
			return p.Node == d.Path
		})
		if i >= 0 && !slices.ContainsFunc(out, func(p adminapi.Device) bool { return p.Name == node[i].Name }) {
			out = append(out, node[i])
		}
	}
	return out
}

// noPortFor explains why no port of the container can take region r.
func noPortFor(r regionRequest, ports []adminapi.Device, used []bool) string {
	if len(ports) == 0 {
		return fmt.Sprintf("the container has no FPGA port: request the resource region-%s for it", r.interfaceID)
	}
	var have []string
	for i, p := range ports {
		s := fmt.Sprintf("%s (interface %s)", p.Node, p.InterfaceID)
		if used[i] {
			s += " taken by a lower-numbered region"
		}
		have = append(have, s)
	}
	return fmt.Sprintf("no free FPGA port of this container has that interface ID; it has %s: request the resource region-%s, or set FPGA_REGION_%d to the interface of a region the container gets",
		strings.Join(have, ", "), r.interfaceID, r.n)
}
