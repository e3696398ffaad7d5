package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

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
	cmd.SetArgs(simDaemonArgs(kubeconfig, sim.Root, base, "--uevent-source", "none", "--sysfs-read-timeout", "1h"))
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

// TestStopWhileBootIDIsStuck: a daemon whose read of the boot ID below
// --root hangs (a FIFO no one writes) stops cleanly when told to.
func TestStopWhileBootIDIsStuck(t *testing.T) {
	sim, err := simnode.Write(t.TempDir(), simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1})
	if err != nil {
		t.Fatal(err)
	}
	bootID := filepath.Join(sim.Root, "proc/sys/kernel/random/boot_id")
	replaceWithFIFO(t, bootID)
	kubeconfig, base := daemonDirs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRootCommand()
	cmd.SetContext(ctx)
	cmd.SetArgs(simDaemonArgs(kubeconfig, sim.Root, base, "--uevent-source", "none", "--pod-resources-socket", filepath.Join(base, "pr.sock")))
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	w := openFIFOWriter(t, bootID, done, "start-up to read the boot ID")
	defer w.Close()
	cancel() // what SIGTERM does through signal.NotifyContext
	waitStopped(t, done, "start-up read the boot ID")
}

// simDaemonArgs are the arguments of a DRA daemon on the simulated node
// at root, with its directories under base and the simulated programmer,
// followed by extra.
func simDaemonArgs(kubeconfig, root, base string, extra ...string) []string {
	return append([]string{"run", "--node-name", "worker-1", "--kubeconfig", kubeconfig, "--mode", "dra",
		"--root", root, "--plugin-dir", filepath.Join(base, "p"), "--registrar-dir", filepath.Join(base, "r"),
		"--cdi-dir", filepath.Join(base, "cdi"), "--bitstream-dir", filepath.Join(base, "bs"), "--programmer", "sim",
		"--bitstream-cache-dir", filepath.Join(base, "cache")}, extra...)
}

// stopFailSafe turns a daemon that hangs into a test failure; it is the
// kubelet's default termination grace period.
const stopFailSafe = 30 * time.Second

// TestStopWhileRefreshIsStuck: a daemon that started normally and whose
// periodic refresh later hangs on a wedged sysfs attribute (a FIFO no one
// writes) stops cleanly when told to: with a long --sysfs-read-timeout,
// while the refresh still waits for the read; with a short one, after the
// refresh gave the read up and went on refreshing the other card.
func TestStopWhileRefreshIsStuck(t *testing.T) {
	for _, tc := range []struct {
		name, readTimeout string
		abandoned         bool
	}{
		{name: "read stays stuck", readTimeout: "1h"},
		{name: "read abandoned", readTimeout: "200ms", abandoned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim, err := simnode.Write(t.TempDir(), simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1})
			if err != nil {
				t.Fatal(err)
			}
			kubeconfig, base := daemonDirs(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ctlDir := filepath.Join(base, "ctl")
			done := runDaemon(ctx, t, ctlDir, simDaemonArgs(kubeconfig, sim.Root, base,
				"--pod-resources-socket", filepath.Join(base, "pr.sock"), "--control-socket", filepath.Join(ctlDir, "control.sock"),
				// With a uevent source each tick is the cheap refresh
				// (Scanner.RefreshContext), as with netlink in a cluster.
				"--uevent-source", "unix:"+filepath.Join(base, "uevents"),
				"--refresh-interval", "10ms", "--sysfs-read-timeout", tc.readTimeout))

			// The writer's open returns once a refresh opened the FIFO
			// for reading: the refresh is then stuck in its read.
			afu := filepath.Join(sim.Cards[0].Ports[0].SysfsPath, "afu_id")
			replaceWithFIFO(t, afu)
			w := openFIFOWriter(t, afu, done, "a refresh to read card 0's afu_id")
			defer w.Close()
			if tc.abandoned {
				// Each refresh reads card 1's afu_id once. Its second
				// read is in a refresh after the one card 0 stalled:
				// that refresh ended and the daemon went on.
				afu1 := filepath.Join(sim.Cards[1].Ports[0].SysfsPath, "afu_id")
				id, err := os.ReadFile(afu1)
				if err != nil {
					t.Fatal(err)
				}
				replaceWithFIFO(t, afu1)
				for i := 0; i < 2; {
					w1 := openFIFOWriter(t, afu1, done, fmt.Sprintf("read %d of card 1's afu_id while card 0's read is stuck", i+1))
					_, err := w1.Write(id)
					w1.Close()
					switch {
					case errors.Is(err, unix.EPIPE):
						// The open met the read answered before, which
						// had its content and was closing: not a new read.
						continue
					case err != nil:
						t.Fatalf("answer the read of card 1's afu_id: %v", err)
					}
					i++
				}
			}

			cancel() // what SIGTERM does through signal.NotifyContext
			waitStopped(t, done, "a refresh was stuck in a sysfs read")
		})
	}
}

// waitStopped waits for run's result on done after a stop, while what
// went on: a clean exit within stopFailSafe.
func waitStopped(t *testing.T, done <-chan error, while string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run stopped while %s with %v, want a clean exit", while, err)
		}
	case <-time.After(stopFailSafe):
		t.Fatalf("run did not return within %s of the stop while %s", stopFailSafe, while)
	}
}

// daemonDirs returns a kubeconfig for an API server without ResourceSlices
// or ResourceClaims (emptyAPIServer; start-up completes once the
// ResourceSlice informer synced: it needs an API server that answers), and
// a base directory for a daemon's directories, short enough for its
// sockets' paths, removed when the test ends.
func daemonDirs(t *testing.T) (kubeconfig, base string) {
	t.Helper()
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`, emptyAPIServer(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "stop")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	return kubeconfig, base
}

// runDaemon runs the daemon with args until ctx ends, with its control
// socket in ctlDir (which it creates). It returns once the socket is
// ready, which is once start-up restored the node's state from its first
// scans, and the channel run's result arrives on.
func runDaemon(ctx context.Context, t *testing.T, ctlDir string, args []string) <-chan error {
	t.Helper()
	if err := os.Mkdir(ctlDir, 0o750); err != nil {
		t.Fatal(err)
	}
	ready := watchForName(t, ctlDir, "control.sock")
	cmd := newRootCommand()
	cmd.SetContext(ctx)
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("watch for the control socket: %v", err)
		}
	case err := <-done:
		t.Fatalf("run returned before its control socket was ready: %v", err)
	case <-time.After(stopFailSafe):
		t.Fatalf("no control socket within %s: start-up did not complete", stopFailSafe)
	}
	return done
}

// replaceWithFIFO puts a FIFO in place of the file at path in one rename,
// so that no read sees the file missing.
func replaceWithFIFO(t *testing.T, path string) {
	t.Helper()
	tmp := path + ".fifo"
	if err := unix.Mkfifo(tmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// openFIFOWriter opens the FIFO at path for writing, which returns once
// the daemon opened it for reading. It fails the test when run returns
// first (done) or nothing reads within stopFailSafe.
func openFIFOWriter(t *testing.T, path string, done <-chan error, what string) *os.File {
	t.Helper()
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		ch <- opened{f, err}
	}()
	unblock := func() {
		// A reader of our own lets the pending open return.
		if r, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			r.Close()
		}
		if o := <-ch; o.f != nil {
			o.f.Close()
		}
	}
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatal(o.err)
		}
		return o.f
	case err := <-done:
		unblock()
		t.Fatalf("run returned (%v) while waiting for %s", err, what)
	case <-time.After(stopFailSafe):
		unblock()
		t.Fatalf("waited %s for %s: the daemon stopped refreshing", stopFailSafe, what)
	}
	return nil
}

// watchForName reports on the returned channel once a file named name is
// created in, or moved into, dir (nil), or why it cannot tell. The watch is
// in place when watchForName returns, so no later creation is missed.
func watchForName(t *testing.T, dir, name string) <-chan error {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	in := os.NewFile(uintptr(fd), "inotify")
	t.Cleanup(func() { in.Close() })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	found := make(chan error, 1)
	go func() {
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			n, err := in.Read(buf)
			if err != nil {
				found <- err
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				start := off + unix.SizeofInotifyEvent
				off = start + int(ev.Len)
				if strings.TrimRight(string(buf[start:off]), "\x00") == name {
					found <- nil
					return
				}
			}
		}
	}()
	return found
}

// emptyAPIServer starts an API server that holds no objects and returns
// its URL: enough for the daemon's informers to sync. A list is empty, a
// watch stays open without events (a streaming list, WatchListClient,
// ends its initial events at once), every other request is refused.
func emptyAPIServer(t *testing.T) string {
	kinds := map[string]string{"resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var apiVersion, plural string
		switch p := strings.Split(strings.Trim(r.URL.Path, "/"), "/"); {
		case len(p) == 3 && p[0] == "api":
			apiVersion, plural = p[1], p[2]
		case len(p) == 4 && p[0] == "apis":
			apiVersion, plural = p[1]+"/"+p[2], p[3]
		}
		kind, ok := kinds[plural]
		if r.Method != http.MethodGet || !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		if q.Get("watch") != "true" {
			fmt.Fprintf(w, `{"apiVersion":%q,"kind":"%sList","metadata":{"resourceVersion":"1"},"items":[]}`, apiVersion, kind)
			return
		}
		if q.Get("sendInitialEvents") == "true" {
			fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"apiVersion":%q,"kind":%q,"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", apiVersion, kind)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections() // ends the watches
		srv.Close()
	})
	return srv.URL
}
