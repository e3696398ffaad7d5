package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

func newSimulateCommand() *cobra.Command {
	var (
		dir, driver, bitstreams string
		opts                    simnode.Options
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
			n, err := simnode.Write(dir, opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
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
			return nil
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
	return cmd
}

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
