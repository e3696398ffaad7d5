// Command probe is the e2e test workload: it prints what the container sees
// of FPGAs (every character device in /dev with its numbers, and the FPGA
// environment), one "key=value" line each between BEGIN and END markers,
// then waits for SIGTERM so the pod stays Running.
package main

import (
	"fmt"
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
	entries, _ := os.ReadDir("/dev")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		var st unix.Stat_t
		p := filepath.Join("/dev", n)
		if err := unix.Stat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		fmt.Printf("dev=%s %d:%d\n", p, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
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
