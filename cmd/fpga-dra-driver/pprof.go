//go:build pprof

package main

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // the profiles this build serves
	"os"
)

// pprofAddressEnv, in a build with the pprof tag, is the address the
// process serves net/http/pprof on (e.g. 127.0.0.1:6060); unset serves
// nothing. test/e2e/preparebench profiles the daemon through it.
const pprofAddressEnv = "FPGA_DRA_PPROF_ADDRESS"

func init() {
	addr := os.Getenv(pprofAddressEnv)
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%s: %v\n", pprofAddressEnv, addr, err)
		os.Exit(1)
	}
	go func() { _ = http.Serve(ln, nil) }()
}
