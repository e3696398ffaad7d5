// Command fpga-dra-driver is the node daemon of the FPGA DRA driver: a DRA
// kubelet plugin that publishes a node's FPGA ports and prepares claims for
// them, plus the tools that share its packages (simulate, discover).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/internal/version"
	_ "github.com/fpga-dra/fpga-dra-driver/pkg/family/xrt" // the card families: Intel's are built in
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	run := newRunCommand()
	root := &cobra.Command{
		Use:           "fpga-dra-driver",
		Short:         "Kubernetes DRA driver for FPGAs (node daemon and tools)",
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without a subcommand the daemon runs.
		RunE: run.RunE,
		// Flags not given on the command line take their environment
		// twins (DaemonSet manifests set those).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return flagenv.Apply(cmd.Flags()) },
	}
	root.Flags().AddFlagSet(run.Flags())
	root.AddCommand(run, newSimulateCommand(), newDiscoverCommand(), newHookCommand(),
		newListCommand(), newInfoCommand(), newInstallCommand(), newProgramCommand(), newInstallHookCommand(), newBitstreamCommand(),
		newTemplateCommand())
	return root
}
