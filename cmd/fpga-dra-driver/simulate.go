package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

func newSimulateCommand() *cobra.Command {
	var (
		dir, driver, bitstreams string
		opts                    simnode.Options
		keepExisting            bool
	)
	cmd := &cobra.Command{
		Use:   "simulate --dir DIR",
		Short: "Write a simulated FPGA node (sysfs and /dev as the DFL or OPAE driver and XRT lay them out)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("--dir is required: the directory to write the simulated node into")
			}
			switch d := discovery.KernelDriver(driver); {
			case d == discovery.DriverDFL || d == discovery.DriverOPAE:
				opts.Driver = d
			case (d == "" || d == discovery.DriverNone) && opts.Cards == 0:
			default:
				return fmt.Errorf("--driver %q: use dfl or opae (or none with --cards 0)", driver)
			}
			out := cmd.OutOrStdout()
			stamp, err := json.Marshal(struct {
				Options    simnode.Options
				Bitstreams string
			}{opts, bitstreams})
			if err != nil {
				return err
			}
			stampPath := filepath.Join(dir, simStampFile)
			if old, err := os.ReadFile(stampPath); keepExisting && err == nil && bytes.Equal(old, stamp) {
				fmt.Fprintf(out, "kept the simulated node in %s: written with the same options; its loaded functions and boot ID stay, as a real node's do when only the driver restarts\n", dir)
				return nil
			}
			n, err := simnode.Write(dir, opts)
			if err != nil {
				return err
			}
			// A node written afresh is a rebooted one: a driver that
			// prepared claims on the old one finds them gone.
			if err := n.SetBootID(uuid.NewString()); err != nil {
				return err
			}
			fmt.Fprintf(out, "simulated node in %s: %d %s cards, %d ports each; %d Alveo cards %v\n", n.Root, len(n.Cards), opts.Driver, opts.PortsPerCard, len(n.Alveo), opts.Alveo)
			if n.RegularFiles {
				fmt.Fprintln(out, "note: this process may not create device nodes (no CAP_MKNOD): /dev entries are regular files and discovery reports those ports unhealthy")
			}
			for _, c := range n.Cards {
				for _, p := range c.Ports {
					fmt.Fprintf(out, "  %s  %-20s  port %d  %s\n", p.PCIAddress, p.Name, p.ID, p.DevPath)
				}
			}
			for _, c := range n.Alveo {
				fmt.Fprintf(out, "  %s  %-20s  Alveo %s  %s (management PF %s, never given out)\n", c.UserAddress, filepath.Base(c.RenderPath), c.Model.Name, c.RenderPath, c.MgmtAddress)
			}
			if bitstreams == "" {
				bitstreams = filepath.Join(n.Root, "srv/fpga/bitstreams")
			}
			var paths []string
			if len(n.Cards) > 0 {
				afus := append([]string{simnode.SampleAFUID}, n.Opts.AFUIDs...)
				if paths, err = program.WriteSimRepository(bitstreams, n.Opts.InterfaceID, afus); err != nil {
					return err
				}
			}
			for _, m := range uniqueModels(n.Alveo) {
				xclbins, err := program.WriteSimXclbinRepository(bitstreams, m.InterfaceIDs[0], m.Platform, []string{simnode.SampleXclbinUUID})
				if err != nil {
					return err
				}
				paths = append(paths, xclbins...)
			}
			fmt.Fprintf(out, "sample bitstreams (for --programmer=sim) in %s:\n", bitstreams)
			for _, p := range paths {
				fmt.Fprintf(out, "  %s\n", p)
			}
			// Written last: a node whose writing was interrupted is
			// written again.
			return atomicfile.Write(stampPath, stamp, atomicfile.Options{Perm: 0o644})
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write the node into (created if missing)")
	f.StringVar(&driver, "driver", "dfl", "kernel driver layout of the Intel cards: dfl or opae (none with --cards 0)")
	f.IntVar(&opts.Cards, "cards", 2, "number of cards")
	f.IntVar(&opts.PortsPerCard, "ports-per-card", 1, "ports on each card")
	f.BoolVar(&opts.VF, "vf", false, "put each port on its own SR-IOV virtual function (FME stays on the PF)")
	f.StringVar(&opts.InterfaceID, "interface-id", simnode.DefaultInterfaceID, "interface ID of every card's PR region")
	f.StringSliceVar(&opts.AFUIDs, "afu-ids", nil, "AFU IDs loaded on the ports, round robin (default: the Intel plugin's test fixture IDs)")
	f.BoolVar(&opts.DashedIDs, "dashed-ids", false, "print IDs as dashed UUIDs")
	f.StringVar(&bitstreams, "bitstream-dir", "", "where to write sample bitstreams for the simulated programmer (default DIR/srv/fpga/bitstreams)")
	f.StringSliceVar(&opts.Alveo, "alveo", nil, "add AMD/Xilinx Alveo cards (XRT) of these models, one each: u250, u55c")
	f.BoolVar(&keepExisting, "keep-existing", false, "leave a node this command wrote before with the same options as it is (loaded functions, boot ID): a pod restart or rolling update of the driver is then not a simulated reboot; on a tmpfs directory (/var/run) a real reboot still starts afresh")
	return cmd
}

// simStampFile, in a simulated node's directory, holds the options it was
// written with.
const simStampFile = ".fpga-dra-simulate.json"

// uniqueModels lists the models of cards, once each, in card order.
func uniqueModels(cards []*simnode.AlveoCard) []simnode.AlveoModel {
	var out []simnode.AlveoModel
	seen := map[string]bool{}
	for _, c := range cards {
		if !seen[c.Model.Name] {
			seen[c.Model.Name] = true
			out = append(out, c.Model)
		}
	}
	return out
}
