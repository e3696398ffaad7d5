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
		Short: "Write a simulated FPGA node (sysfs and /dev as the DFL or OPAE driver lays them out)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("--dir is required: the directory to write the simulated node into")
			}
			d, err := discovery.ParseKernelDriver(driver)
			if err != nil || d == "" || d == discovery.DriverNone {
				return fmt.Errorf("--driver %q: use dfl or opae", driver)
			}
			opts.Driver = d
			n, err := simnode.Write(dir, opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "simulated %s node in %s: %d cards, %d ports each\n", d, n.Root, len(n.Cards), opts.PortsPerCard)
			if n.RegularFiles {
				fmt.Fprintln(out, "note: this process may not create device nodes (no CAP_MKNOD): /dev entries are regular files and discovery reports those ports unhealthy")
			}
			for _, c := range n.Cards {
				for _, p := range c.Ports {
					fmt.Fprintf(out, "  %s  %-20s  port %d  %s\n", p.PCIAddress, p.Name, p.ID, p.DevPath)
				}
			}
			if bitstreams == "" {
				bitstreams = filepath.Join(n.Root, "srv/fpga/bitstreams")
			}
			afus := append([]string{simnode.SampleAFUID}, n.Opts.AFUIDs...)
			paths, err := program.WriteSimRepository(bitstreams, n.Opts.InterfaceID, afus)
			if err != nil {
				return err
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
	f.StringVar(&driver, "driver", "dfl", "kernel driver layout: dfl or opae")
	f.IntVar(&opts.Cards, "cards", 2, "number of cards")
	f.IntVar(&opts.PortsPerCard, "ports-per-card", 1, "ports on each card")
	f.BoolVar(&opts.VF, "vf", false, "put each port on its own SR-IOV virtual function (FME stays on the PF)")
	f.StringVar(&opts.InterfaceID, "interface-id", simnode.DefaultInterfaceID, "interface ID of every card's PR region")
	f.StringSliceVar(&opts.AFUIDs, "afu-ids", nil, "AFU IDs loaded on the ports, round robin (default: the Intel plugin's test fixture IDs)")
	f.BoolVar(&opts.DashedIDs, "dashed-ids", false, "print IDs as dashed UUIDs")
	f.StringVar(&bitstreams, "bitstream-dir", "", "where to write sample bitstreams for the simulated programmer (default DIR/srv/fpga/bitstreams)")
	return cmd
}
