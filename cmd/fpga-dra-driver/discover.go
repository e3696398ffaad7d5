package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

func newDiscoverCommand() *cobra.Command {
	var (
		root, nodeName, driverName, output, kernelDriver string
		programmable                                     bool
	)
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "Print the ResourceSlices the driver would publish for this node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sel, err := discovery.ParseSelection(kernelDriver)
			if err != nil {
				return fmt.Errorf("--kernel-driver: %w", err)
			}
			s := &discovery.Scanner{Root: root, Select: sel}
			res, err := s.Scan()
			if err != nil {
				return err
			}
			for _, e := range res.Errors {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", e)
			}
			if len(res.Drivers) == 0 {
				return fmt.Errorf("no FPGA kernel driver below %s: none of sys/class/fpga (OPAE), sys/class/fpga_region (DFL), sys/bus/pci/drivers/xocl (XRT) exists", root)
			}
			if len(res.Ports()) == 0 {
				return fmt.Errorf("the %s driver is loaded below %s but no usable FPGA port was found (%d errors above)", strings.Join(driverNames(res.Drivers), " and "), root, len(res.Errors))
			}
			devices := deviceslice.Devices(res, deviceslice.Options{DriverName: driverName, Programmable: programmable, Root: root})
			slices := deviceslice.SliceObjects(driverName, nodeName, deviceslice.Resources(nodeName, devices))
			list := map[string]any{"apiVersion": "v1", "kind": "List", "items": slices}
			var out []byte
			switch strings.ToLower(output) {
			case "json":
				out, err = json.MarshalIndent(list, "", "  ")
				out = append(out, '\n')
			case "yaml":
				out, err = yaml.Marshal(list)
			default:
				return fmt.Errorf("-o %q: use json or yaml", output)
			}
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", "/", "directory holding sys/ and dev/ (a simulated node's --dir)")
	f.StringVar(&nodeName, "node-name", hostname(), "node name the slices are published for")
	f.StringVar(&driverName, "driver-name", v1alpha1.DriverName, "DRA driver name, also the attribute domain")
	f.StringVarP(&output, "output", "o", "yaml", "output format: json or yaml")
	f.StringVar(&kernelDriver, "kernel-driver", "auto", "card families to read: auto (every loaded one), a list (dfl,xrt), or auto with exclusions (auto,-xrt)")
	f.BoolVar(&programmable, "programmable", true, "whether this node allows reprogramming")
	flagenv.Twins(f, map[string]string{
		"root":          "FPGA_ROOT",
		"node-name":     "NODE_NAME",
		"driver-name":   "DRIVER_NAME",
		"kernel-driver": "KERNEL_DRIVER",
	})
	return cmd
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func driverNames(ds []discovery.KernelDriver) []string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = string(d)
	}
	return names
}
