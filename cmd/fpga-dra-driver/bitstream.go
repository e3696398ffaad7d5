package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

// pushedInfo is what bitstream push prints.
type pushedInfo struct {
	Reference      string          `json:"reference"`
	ManifestDigest string          `json:"manifestDigest"`
	LayerDigest    string          `json:"layerDigest"`
	Size           int64           `json:"size"`
	Annotations    oci.Annotations `json:"annotations"`
}

// inspectedInfo is what bitstream inspect prints: the artifact and the
// header of the file in its layer.
type inspectedInfo struct {
	pushedInfo
	Bitstream bitstreamInfo `json:"bitstream"`
}

func (i pushedInfo) rows() [][]string {
	return [][]string{
		{"REFERENCE", i.Reference}, {"MANIFEST DIGEST", i.ManifestDigest}, {"LAYER DIGEST", i.LayerDigest},
		{"SIZE", fmt.Sprint(i.Size)}, {"FORMAT", string(i.Annotations.Format)}, {"VENDOR", i.Annotations.Vendor},
		{"INTERFACE ID", i.Annotations.InterfaceID}, {"AFU ID", i.Annotations.AFUID},
	}
}

func newBitstreamCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bitstream",
		Short: "Push bitstreams to an OCI registry and inspect them as a node would",
	}
	cmd.AddCommand(newBitstreamPushCommand(), newBitstreamInspectCommand())
	return cmd
}

// registryFlags registers the registry flags (and their environment twins)
// of a bitstream subcommand and returns what makes a client from them.
func registryFlags(cmd *cobra.Command) func() (*oci.Client, error) {
	var o oci.RegistryOptions
	o.AddFlags(cmd.Flags())
	twins := map[string]string{}
	for _, f := range []string{oci.FlagRegistryConfig, oci.FlagRegistryCAFile, oci.FlagInsecureRegistries} {
		twins[f] = oci.EnvTwins[f]
	}
	flagenv.Twins(cmd.Flags(), twins)
	return func() (*oci.Client, error) { return oci.NewClient(o) }
}

func newBitstreamPushCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "push FILE REFERENCE",
		Short: "Push a GBS or AOCX bitstream as an OCI artifact and print the digest reference to pin",
		Long: `Parses FILE (a malformed bitstream is refused), fills the artifact's annotations
from its header and pushes it to REFERENCE, REGISTRY/REPOSITORY[:TAG]. It prints
the reference pinned by the manifest's digest: name exactly that in an
FpgaConfig's or AcceleratorFunction's bitstreamRef. "-o reference" prints
only it.`,
		Args: cobra.ExactArgs(2),
	}
	newClient := registryFlags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or reference")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		p, err := c.Push(cmd.Context(), args[0], args[1])
		if err != nil {
			return err
		}
		if output == "reference" {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), p.Reference)
			return err
		}
		i := pushedInfo{Reference: p.Reference, ManifestDigest: p.ManifestDigest, LayerDigest: p.LayerDigest, Size: p.Size, Annotations: p.Annotations}
		return printOutput(cmd.OutOrStdout(), output, i, i.rows())
	}
	return cmd
}

func newBitstreamInspectCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "inspect REFERENCE",
		Short: "Pull and verify a bitstream artifact as a node would, and show it",
		Long: `Fetches REFERENCE and checks it as a node does (manifest and layer digests,
artifact type, layer media type and size, annotations against the file's
header) without keeping the file. REFERENCE may be REGISTRY/REPOSITORY:TAG:
the output then shows the digest reference to pin (nodes accept only that).`,
		Args: cobra.ExactArgs(1),
	}
	newClient := registryFlags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		in, err := c.Inspect(cmd.Context(), args[0], 0)
		if err != nil {
			return err
		}
		i := inspectedInfo{
			pushedInfo: pushedInfo{Reference: in.Reference, ManifestDigest: in.ManifestDigest, LayerDigest: in.LayerDigest, Size: in.Size, Annotations: in.Annotations},
			Bitstream:  infoOf("", in.Bitstream),
		}
		rows := i.rows()
		if a := i.Bitstream.Accelerator; a != "" {
			rows = append(rows, []string{"ACCELERATOR", a})
		}
		if p := i.Bitstream.Platform; p != "" {
			rows = append(rows, []string{"PLATFORM", p})
		}
		rows = append(rows, []string{"PAYLOAD BYTES", fmt.Sprint(i.Bitstream.PayloadBytes)}, []string{"VERIFIED", "manifest, layer digest, header matches annotations"})
		return printOutput(cmd.OutOrStdout(), output, i, rows)
	}
	return cmd
}
