package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

// hookBinaryName is the installed hook's file name in --dir.
const hookBinaryName = "fpga-dra-driver"

func newInstallHookCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "install-hook",
		Short: "Copy this program to a host directory, where the container runtime runs it as the region programming hook",
		Long: `The device-plugin endpoint's region mode adds a createRuntime hook to the
containers it serves; the container runtime runs the hook on the host, so the
program must be on the host's file system. The Helm chart runs this command in
an init container with a host directory mounted at --dir, and passes the
resulting path to the daemon as --hook-path. The copy replaces an older one
atomically (a hook the runtime is running keeps its file) and is skipped when
the installed program is already this one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, changed, err := installHook(dir)
			if err != nil {
				return err
			}
			if changed {
				fmt.Fprintf(cmd.OutOrStdout(), "installed %s\n", path)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is up to date\n", path)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "host directory to copy the program into (required)")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

// installHook copies the running executable to dir/fpga-dra-driver (mode
// 0755) unless an identical file is there, and returns the path and
// whether it wrote it.
func installHook(dir string) (string, bool, error) {
	self, err := os.Executable()
	if err != nil {
		return "", false, fmt.Errorf("find this program's path: %w", err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return "", false, fmt.Errorf("read this program: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("--dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, hookBinaryName)
	// Up to date only when the bytes and the mode are this program's: the
	// runtime runs the file as root, so a copy that is not executable, or
	// that others may write, is replaced too.
	// A set-ID copy runs as its owner for anyone; a copy another user
	// owns is theirs to replace.
	if fi, err := os.Lstat(path); err == nil && fi.Mode() == 0o755 && ownedBySelf(fi) {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			return path, false, nil
		}
	}
	if err := atomicfile.Write(path, data, atomicfile.Options{Perm: 0o755}); err != nil {
		return "", false, fmt.Errorf("install the hook: %w", err)
	}
	return path, true, nil
}

// ownedBySelf reports whether this process's user owns the file fi
// describes.
func ownedBySelf(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
