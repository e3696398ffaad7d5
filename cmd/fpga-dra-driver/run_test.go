package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestStopWhileStarting: a daemon told to stop while it still waits for an
// API server that accepted its connection but never answers stops at once
// and cleanly (exit status 0), as a SIGTERM from the kubelet expects.
func TestStopWhileStarting(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := lis.Accept(); err == nil {
			accepted <- c // held open, never answered
		}
	}()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://%s"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`, lis.Addr()), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRootCommand()
	cmd.SetContext(ctx)
	cmd.SetArgs([]string{"run", "--node-name", "worker-1", "--kubeconfig", kubeconfig, "--mode", "auto", "--plugin-dir", t.TempDir()})
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	var conn net.Conn
	select {
	case conn = <-accepted:
	case err := <-done:
		t.Fatalf("run returned before it asked the API server: %v", err)
	}
	defer conn.Close()
	// Take the daemon's request, so that what the connection yields next
	// tells whether the client gave up on it.
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		t.Fatalf("read the daemon's request: %v", err)
	}
	cancel() // what SIGTERM does through signal.NotifyContext
	if err := <-done; err != nil {
		t.Errorf("run stopped during start-up with %v, want a clean exit", err)
	}
	// The daemon stopped while its request was still waiting, not after
	// the client timed out and dropped the connection.
	if err := conn.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("after the stop, reading the connection of %s %s gave %v: the daemon waited for its request to fail instead of stopping", req.Method, req.URL, err)
	}
}

// TestStopWhileDiscoveryIsStuck: a daemon whose discovery hangs on a
// wedged sysfs attribute (a FIFO no one writes) still stops cleanly when
// told to.
func TestStopWhileDiscoveryIsStuck(t *testing.T) {
	sim, err := simnode.Write(t.TempDir(), simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1})
	if err != nil {
		t.Fatal(err)
	}
	afu := filepath.Join(sim.Cards[0].Ports[0].SysfsPath, "afu_id")
	if err := os.Remove(afu); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(afu, 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "stop")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRootCommand()
	cmd.SetContext(ctx)
	cmd.SetArgs([]string{"run", "--node-name", "worker-1", "--kubeconfig", kubeconfig, "--mode", "dra",
		"--root", sim.Root, "--plugin-dir", filepath.Join(base, "p"), "--registrar-dir", filepath.Join(base, "r"),
		"--cdi-dir", filepath.Join(base, "cdi"), "--bitstream-dir", filepath.Join(base, "bs"), "--programmer", "sim",
		"--uevent-source", "none", "--sysfs-read-timeout", "1h", "--bitstream-cache-dir", filepath.Join(base, "cache")})
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	// A writer's open returns once discovery opened the FIFO for reading:
	// discovery is then stuck in its read.
	w, err := os.OpenFile(afu, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cancel() // what SIGTERM does through signal.NotifyContext
	if err := <-done; err != nil {
		t.Fatalf("run stopped while discovery was stuck with %v, want a clean exit", err)
	}
}
