package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/flock"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// adminFlags locate the daemon, or what it would use when it is down.
type adminFlags struct {
	driverName, pluginDir, controlSocket string
	root, kernelDriver, output           string
}

func (f *adminFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.driverName, "driver-name", v1alpha1.DriverName, "DRA driver name")
	fs.StringVar(&f.pluginDir, "plugin-dir", "", "the daemon's plugin data directory; "+kubeletPluginsDir+"/<driver-name> when empty")
	fs.StringVar(&f.controlSocket, "control-socket", "", "the daemon's control socket; <plugin-dir>/control.sock when empty")
	fs.StringVar(&f.root, "root", "/", "directory holding sys/ and dev/, used when the daemon is not running")
	fs.StringVar(&f.kernelDriver, "kernel-driver", "auto", "card families to read when the daemon is not running: auto (every loaded one), a list (dfl,xrt), or auto with exclusions (auto,-xrt)")
	flagenv.Twins(fs, map[string]string{
		"driver-name":    "DRIVER_NAME",
		"plugin-dir":     "PLUGIN_DIR",
		"control-socket": "CONTROL_SOCKET",
		"root":           "FPGA_ROOT",
		"kernel-driver":  "KERNEL_DRIVER",
	})
	fs.StringVarP(&f.output, "output", "o", "table", "table or json")
}

func (f *adminFlags) complete() {
	if f.pluginDir == "" {
		f.pluginDir = defaultPluginDir(f.driverName)
	}
	if f.controlSocket == "" {
		f.controlSocket = defaultControlSocket(f.pluginDir)
	}
}

// daemon returns a client when the daemon answers on its control socket,
// nil when nothing listens there.
func (f *adminFlags) daemon() *adminapi.Client {
	conn, err := net.DialTimeout("unix", f.controlSocket, 2*time.Second)
	if err != nil {
		return nil
	}
	conn.Close()
	return adminapi.NewClient(f.controlSocket)
}

// offline reads the node as the daemon would: discovery below --root and
// the holds in the daemon's checkpoint (read only).
func (f *adminFlags) offline() (*discovery.Result, map[string]*state.ClaimRecord, error) {
	sel, err := discovery.ParseSelection(f.kernelDriver)
	if err != nil {
		return nil, nil, fmt.Errorf("--kernel-driver: %w", err)
	}
	res, err := (&discovery.Scanner{Root: f.root, Select: sel}).Scan()
	if err != nil {
		return nil, nil, err
	}
	holders := map[string]*state.ClaimRecord{}
	b, err := os.ReadFile(filepath.Join(f.pluginDir, checkpoint.FileName))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, nil, err
	default:
		cp, err := checkpoint.Read(b)
		if err != nil {
			return nil, nil, fmt.Errorf("the daemon's checkpoint cannot be read whole, so holds may be missing: %w: start the daemon, which rebuilds them from the CDI specs, and ask it", err)
		}
		for _, rec := range cp.Claims {
			for _, d := range rec.Devices {
				holders[d.Device] = rec
			}
		}
	}
	return res, holders, nil
}

func newListCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the node's FPGA ports: IDs, health, and which claim holds each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.complete()
			var list adminapi.DeviceList
			if c := f.daemon(); c != nil {
				var err error
				if list, err = c.List(cmd.Context()); err != nil {
					return err
				}
			} else {
				res, holders, err := f.offline()
				if err != nil {
					return err
				}
				list = offlineList(res, holders)
			}
			rows := [][]string{{"DEVICE", "NODE", "PCI", "NUMA", "INTERFACE ID", "AFU ID", "HEALTH", "HELD BY"}}
			for _, d := range list.Devices {
				held := "-"
				if d.Holder != nil {
					held = fmt.Sprintf("%s/%s", d.Holder.Namespace, d.Holder.Name)
				}
				rows = append(rows, []string{d.Name, d.Node, d.PCIAddress, fmt.Sprint(d.NUMANode), d.InterfaceID, orDash(d.AFUID), d.Health, held})
			}
			return printOutput(cmd.OutOrStdout(), f.output, list, rows)
		},
	}
	f.register(cmd)
	return cmd
}

func offlineList(res *discovery.Result, holders map[string]*state.ClaimRecord) adminapi.DeviceList {
	return adminapi.DeviceList{Devices: adminapi.Devices(res, func(device string) *adminapi.Holder {
		if rec := holders[device]; rec != nil {
			return &adminapi.Holder{UID: rec.UID, Namespace: rec.Namespace, Name: rec.Name}
		}
		return nil
	})}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newProgramCommand() *cobra.Command {
	var (
		f                      adminFlags
		port, file, repo, kind string
		timeout                time.Duration
		force                  bool
	)
	cmd := &cobra.Command{
		Use:   "program --port PORT --bitstream FILE",
		Short: "Program a free port with a bitstream (through the running daemon, so its locks and checks hold)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.complete()
			if port == "" || file == "" {
				return errors.New("--port and --bitstream are required: e.g. --port /dev/dfl-port.0 --bitstream accel.gbs")
			}
			// The daemon only loads from its repository: put the file there
			// (under its IDs; an identical copy is fine).
			bs, err := program.Install(repo, file, force)
			if err != nil {
				return fmt.Errorf("put %s into the repository %s: %w", file, repo, err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var resp adminapi.ProgramResponse
			if c := f.daemon(); c != nil {
				resp, err = c.Program(ctx, adminapi.ProgramRequest{Device: port, InterfaceID: bs.InterfaceID, AFUID: bs.AFUID, Admin: true})
			} else {
				resp, err = f.programOffline(ctx, port, bs, kind)
			}
			if err != nil {
				return err
			}
			rows := [][]string{{"DEVICE", resp.Device}, {"NODE", resp.Node}, {"AFU ID", resp.AFUID},
				{"PROGRAMMED", fmt.Sprint(resp.Programmed)}, {"BITSTREAM", orDash(resp.Bitstream)},
				{"SECONDS", fmt.Sprintf("%.3f", resp.DurationSeconds)}}
			return printOutput(cmd.OutOrStdout(), f.output, resp, rows)
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&port, "port", "", "the port: /dev/dfl-port.0, dfl-port.0 or its DRA device name")
	fs.StringVar(&file, "bitstream", "", "a GBS, AOCX or xclbin file; it is installed into the repository first")
	fs.StringVar(&repo, "bitstream-dir", program.DefaultRepositoryDir, "the daemon's bitstream repository")
	fs.BoolVar(&force, "force", false, "replace another build of the same AFU installed in the repository")
	fs.StringVar(&kind, "programmer", program.KindAuto, "backend when the daemon is not running: "+programmerUsage)
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	flagenv.Twins(fs, map[string]string{
		"bitstream-dir": "BITSTREAM_DIR",
		"programmer":    "PROGRAMMER",
	})
	return cmd
}

// programOffline programs a port without the daemon, refusing a port its
// checkpoint says is held. It holds the daemon's state lock meanwhile: a
// daemon that runs (its control socket did not answer this process) holds
// it, and the programming is refused; one that starts meanwhile waits.
func (f *adminFlags) programOffline(ctx context.Context, name string, bs *program.Bitstream, kind string) (adminapi.ProgramResponse, error) {
	path := filepath.Join(f.pluginDir, stateLockFile)
	// Where no daemon ever ran, the lock is taken where one would: a
	// daemon that starts meanwhile waits for it.
	if err := os.MkdirAll(f.pluginDir, 0o750); err != nil {
		return adminapi.ProgramResponse{}, fmt.Errorf("--plugin-dir: %w", err)
	}
	held, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lock, err := flock.Acquire(held, path, func() { cancel(errors.New("the daemon holds it")) })
	switch {
	case errors.Is(err, flock.ErrHeld):
		return adminapi.ProgramResponse{}, fmt.Errorf("the daemon runs on this node (%s: %w) but its control socket %s did not answer: ask it again, or stop it to program offline", path, err, f.controlSocket)
	case err != nil:
		return adminapi.ProgramResponse{}, fmt.Errorf("the daemon's state lock: %w", err)
	}
	defer lock.Close()
	res, holders, err := f.offline()
	if err != nil {
		return adminapi.ProgramResponse{}, err
	}
	for _, c := range res.Cards {
		for _, p := range c.Ports {
			if name != p.Node.Path && name != p.Node.Name && name != p.DeviceName() {
				continue
			}
			if rec := holders[p.DeviceName()]; rec != nil {
				return adminapi.ProgramResponse{}, fmt.Errorf("port %s is held by %s/%s (%s): an administrator may program only a free port", p.Node.Path, rec.Namespace, rec.Name, rec.UID)
			}
			prog, err := program.NewProgrammer(kind)
			if err != nil {
				return adminapi.ProgramResponse{}, fmt.Errorf("--programmer: %w", err)
			}
			r, err := program.Load(ctx, prog, c, p, bs, program.LoadOptions{})
			if err != nil {
				return adminapi.ProgramResponse{}, err
			}
			return adminapi.ProgramResponse{Device: p.DeviceName(), Node: p.Node.Path, AFUID: r.AFUID, Programmed: true, Bitstream: r.Path, DurationSeconds: r.TotalDuration.Seconds()}, nil
		}
	}
	return adminapi.ProgramResponse{}, fmt.Errorf("no FPGA port %q below %s: `fpga-dra-driver list` shows the ports", name, f.root)
}
