package deviceplugin_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
)

// waitFor polls cond until it holds, for at most 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestKubeletRestartRegistersOnce: after each kubelet restart every
// resource registers exactly once with the new kubelet, also when the
// kubelet.sock event reaches the endpoint after it registered.
func TestKubeletRestartRegistersOnce(t *testing.T) {
	n := startNode(t, nodeOptions{})
	n.kubelet.waitRegistrations(t, 2)
	k := n.kubelet
	for i := range 10 {
		k = k.restart(t)
		k.waitRegistrations(t, 2)
		// Once an event after the registrations was handled and a sync
		// pass followed it, every earlier event (the new kubelet.sock's
		// among them) has been handled and acted on.
		marker := filepath.Join(n.dir, fmt.Sprintf("marker-%d", i))
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the marker's event and a sync after it", func() bool {
			name, at, now := deviceplugin.LastHandled(n.plugin)
			return name == marker && now > at
		})
		select {
		case r := <-k.regs:
			t.Fatalf("restart %d: %s registered twice with one kubelet", i, r.ResourceName)
		default:
		}
	}
}

// gatedKubelet is a kubelet whose Register calls wait for each other: a
// call returns only once want calls were in flight at the same moment
// (a barrier). A call whose context ends (the plugin's RegisterTimeout,
// or the server stopping) leaves the count, so calls made one after the
// other never add up to want, however many of them there are.
type gatedKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	want int
	// allIn is closed once want calls were in flight at once.
	allIn chan struct{}

	mu          sync.Mutex
	inFlight    int
	maxInFlight int
}

func (k *gatedKubelet) Register(ctx context.Context, _ *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.inFlight++
	k.maxInFlight = max(k.maxInFlight, k.inFlight)
	if k.inFlight == k.want {
		select {
		case <-k.allIn:
		default:
			close(k.allIn)
		}
	}
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.inFlight--
		k.mu.Unlock()
	}()
	select {
	case <-k.allIn:
		return &pluginapi.Empty{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// maxConcurrent returns the most Register calls that were in flight at
// once so far.
func (k *gatedKubelet) maxConcurrent() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.maxInFlight
}

// TestResourcesRegisterInParallel: every resource's Register call is in
// flight at the same time, so a slow registration holds up no other. A
// serial implementation keeps one call in flight until its
// RegisterTimeout ends it; the test gives up well before that and fails.
func TestResourcesRegisterInParallel(t *testing.T) {
	n := startNode(t, nodeOptions{noKubelet: true})
	want := len(n.plugin.Resources())
	if want < 2 {
		t.Fatalf("the node has %d resources; the test needs at least 2", want)
	}
	// Listening before it appears under its name: a socket seen between
	// bind and listen refuses the first Register, whose retry backoff
	// would make the test about timing.
	tmp := filepath.Join(n.dir, "kubelet.sock.tmp")
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		t.Fatal(err)
	}
	k := &gatedKubelet{want: want, allIn: make(chan struct{})}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	if err := os.Rename(tmp, filepath.Join(n.dir, deviceplugin.KubeletSocket)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deviceplugin.DefaultRegisterTimeout/2)
	defer cancel()
	select {
	case <-k.allIn:
	case <-ctx.Done():
		t.Fatalf("at most %d of the %d resources' Register calls were in flight at once after %s, want all %d: registration is not parallel",
			k.maxConcurrent(), want, deviceplugin.DefaultRegisterTimeout/2, want)
	}
	if got := k.maxConcurrent(); got != want {
		t.Fatalf("%d Register calls were in flight at once, want %d (one per resource)", got, want)
	}
}
