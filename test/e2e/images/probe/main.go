// Command probe is the e2e test workload: it prints what the container sees
// of FPGAs (every character device below /dev with its numbers, and the FPGA
// environment, the device metadata files), one "key=value" line each between BEGIN and END markers,
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

// metadataDir is where containers find their devices' metadata.
const metadataDir = "/var/run/kubernetes.io/dra-device-attributes"

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
	// The device metadata files the kubelet mounted (KEP-5304), each
	// on one line.
	_ = filepath.WalkDir(metadataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		// A stream of JSON objects (one per API version): JSON has no
		// raw newline inside a value, so they can go.
		if b, err := os.ReadFile(p); err == nil {
			fmt.Printf("meta=%s %s\n", p, strings.ReplaceAll(string(b), "\n", " "))
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
