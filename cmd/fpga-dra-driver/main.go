// Command fpga-dra-driver is the node daemon of the FPGA DRA driver: a DRA
// kubelet plugin that publishes a node's FPGA ports and prepares claims for
// them, plus the tools that share its packages (simulate, discover).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
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
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without a subcommand the daemon runs.
		RunE: run.RunE,
	}
	root.Flags().AddFlagSet(run.Flags())
	root.AddCommand(run, newSimulateCommand(), newDiscoverCommand(), newHookCommand(),
		newListCommand(), newInfoCommand(), newInstallCommand(), newProgramCommand(), newInstallHookCommand())
	return root
}

// envOr returns the environment variable's value, or def when it is unset:
// every daemon flag has an environment twin for DaemonSet manifests.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
