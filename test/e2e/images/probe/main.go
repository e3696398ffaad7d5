// Command probe is the e2e test workload: it prints what the container sees
// of FPGAs (every character device below /dev with its numbers, and the FPGA
// environment), one "key=value" line each between BEGIN and END markers,
// then waits for SIGTERM so the pod stays Running.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	fmt.Println("FPGA-PROBE-BEGIN")
	// Every character device below /dev, in subdirectories too
	// (/dev/dri/renderD128, /dev/xfpga/...); links are not followed.
	_ = filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeCharDevice == 0 {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			fmt.Printf("dev=%s %d:%d\n", p, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		return nil
	})
	env := os.Environ()
	sort.Strings(env)
	for _, e := range env {
		if strings.HasPrefix(e, "FPGA_") || strings.HasPrefix(e, "ACCELERATOR_UNITS=") {
			fmt.Printf("env=%s\n", e)
		}
	}
	fmt.Println("FPGA-PROBE-END")
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
