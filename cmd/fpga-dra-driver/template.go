package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/slicetemplate"
)

func newTemplateCommand() *cobra.Command {
	var (
		shape                      slicetemplate.Shape
		opts                       slicetemplate.Options
		root, kernelDriver, output string
		programmable               bool
	)
	cmd := &cobra.Command{
		Use:   "template (--model M --cards N --interface-id ID | --root DIR)",
		Short: "Print the ResourceSlice template an autoscaler needs for nodes that do not exist yet",
		Long: `Prints what the driver will publish on a node before the node exists, without
the attributes a node learns only while it runs (afuID, healthy) and without
health taints: for a card model and count (--model), or read from a live or
simulated node (--root). A template for a model also leaves out what the model
does not determine (numaNode, socketID, bitstreamID, PCI addresses; its device
names follow a simulated PCI layout). Output: a ResourceSlice List (-o yaml,
json) or Karpenter's InstanceType.DynamicResources in JSON (-o karpenter).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := discovery.ParseKernelDriver(kernelDriver)
			if err != nil {
				return fmt.Errorf("--kernel-driver: %w", err)
			}
			var t *slicetemplate.Template
			switch {
			case shape.Model != "" && root != "":
				return errors.New("--model and --root exclude each other: describe a card model, or read a node")
			case shape.Model != "":
				shape.KernelDriver = d
				shape.Programmable = &programmable
				t, err = slicetemplate.ForShape(shape, opts)
			case root != "":
				t, err = slicetemplate.FromNode(root, d, programmable, opts)
			default:
				return fmt.Errorf("give --model (one of %s) with --cards and --interface-id, or --root DIR of a node", strings.Join(slicetemplate.ModelNames(), ", "))
			}
			if err != nil {
				return err
			}
			var out []byte
			switch strings.ToLower(output) {
			case "yaml":
				out, err = yaml.Marshal(sliceList(t))
			case "json":
				out, err = json.MarshalIndent(sliceList(t), "", "  ")
			case "karpenter":
				out, err = json.MarshalIndent(t.Karpenter(), "", "  ")
			default:
				return fmt.Errorf("-o %q: use yaml, json or karpenter", output)
			}
			if err != nil {
				return err
			}
			if !strings.HasSuffix(string(out), "\n") {
				out = append(out, '\n')
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&shape.Model, "model", "", "card model: "+strings.Join(slicetemplate.ModelNames(), ", "))
	f.IntVar(&shape.Cards, "cards", 1, "with --model: cards per node")
	f.StringVar(&shape.InterfaceID, "interface-id", "", "with --model: interface `ID` of the cards' FIM, 32 hex digits (the interfaceID a running node publishes; fpga-dra-driver discover shows it)")
	f.BoolVar(&shape.VirtualFunctions, "vf", false, "with --model: every port on its own SR-IOV virtual function")
	f.StringVar(&root, "root", "", "read the template from the node whose sys/ and dev/ are below DIR (/ on a host, a simulated node's --dir)")
	f.StringVar(&kernelDriver, "kernel-driver", "auto", "kernel driver of the nodes: auto (the model's first, or detected below --root), dfl, opae or xrt")
	f.BoolVar(&programmable, "programmable", true, "the daemon's --programmable on these nodes")
	f.StringVar(&opts.DriverName, "driver-name", v1alpha1.DriverName, "the daemon's --driver-name, also the attribute domain")
	f.StringVar(&opts.NodeName, "node-name", slicetemplate.DefaultNodeName, "node (and pool) name the template's slices carry")
	f.StringVarP(&output, "output", "o", "yaml", "yaml or json (a ResourceSlice List), or karpenter (InstanceType.DynamicResources)")
	return cmd
}

// sliceList wraps a template's slices in a List, as `kubectl apply -f`
// and `discover` take them.
func sliceList(t *slicetemplate.Template) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "List", "items": t.ResourceSlices()}
}
