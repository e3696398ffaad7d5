package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// bitstreamInfo is what info and install print about a bitstream.
type bitstreamInfo struct {
	File         string `json:"file"`
	Format       string `json:"format"`
	InterfaceID  string `json:"interfaceID"`
	AFUID        string `json:"afuID"`
	Accelerator  string `json:"accelerator,omitempty"`
	Platform     string `json:"platform,omitempty"`
	FileBytes    int64  `json:"fileBytes"`
	PayloadBytes int64  `json:"payloadBytes"`
	SHA256       string `json:"sha256"`
}

func infoOf(path string, bs *program.Bitstream) bitstreamInfo {
	i := bitstreamInfo{
		File: path, Format: string(bs.Format), InterfaceID: bs.InterfaceID, AFUID: bs.AFUID,
		Platform: bs.Platform, FileBytes: bs.Size, PayloadBytes: bs.PayloadSize, SHA256: bs.SHA256,
	}
	if c := bs.Metadata.AFUImage.AcceleratorClusters; len(c) > 0 {
		i.Accelerator = c[0].Name
	}
	return i
}

func (i bitstreamInfo) rows() [][]string {
	return [][]string{
		{"FILE", i.File}, {"FORMAT", i.Format}, {"INTERFACE ID", i.InterfaceID}, {"AFU ID", i.AFUID},
		{"ACCELERATOR", i.Accelerator}, {"PLATFORM", i.Platform},
		{"FILE BYTES", fmt.Sprint(i.FileBytes)}, {"PAYLOAD BYTES", fmt.Sprint(i.PayloadBytes)}, {"SHA256", i.SHA256},
	}
}

func newInfoCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "info FILE",
		Short: "Show a GBS, AOCX or xclbin bitstream's header: interface ID, AFU ID (xclbin UUID), sizes, sha256",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bs, err := program.Open(args[0], program.WithDigest())
			if err != nil {
				return err
			}
			i := infoOf(args[0], bs)
			return printOutput(cmd.OutOrStdout(), output, i, i.rows())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func newInstallCommand() *cobra.Command {
	var (
		output, dir string
		force       bool
	)
	cmd := &cobra.Command{
		Use:   "install FILE",
		Short: "Copy a bitstream into the node's repository under its IDs (<interfaceID>/<afuID>.gbs)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bs, err := program.Install(dir, args[0], force)
			if err != nil {
				return err
			}
			i := infoOf(bs.Path, bs)
			return printOutput(cmd.OutOrStdout(), output, i, append([][]string{{"INSTALLED", bs.Name}}, i.rows()...))
		},
	}
	cmd.Flags().StringVar(&dir, "bitstream-dir", program.DefaultRepositoryDir, "the node's bitstream repository")
	cmd.Flags().BoolVar(&force, "force", false, "replace an installed file with other content")
	flagenv.Twins(cmd.Flags(), map[string]string{
		"bitstream-dir": "BITSTREAM_DIR",
	})
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}
