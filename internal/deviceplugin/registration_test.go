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

// gatedKubelet answers no registration until want of them are in flight
// at once.
type gatedKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	want    int
	mu      sync.Mutex
	waiting int
	allIn   chan struct{}
}

func (k *gatedKubelet) Register(ctx context.Context, _ *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	k.waiting++
	if k.waiting == k.want {
		close(k.allIn)
	}
	k.mu.Unlock()
	select {
	case <-k.allIn:
		return &pluginapi.Empty{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestResourcesRegisterInParallel: every resource registers at once, so a
// slow registration holds up no other.
func TestResourcesRegisterInParallel(t *testing.T) {
	n := startNode(t, nodeOptions{noKubelet: true})
	lis, err := net.Listen("unix", filepath.Join(n.dir, deviceplugin.KubeletSocket))
	if err != nil {
		t.Fatal(err)
	}
	k := &gatedKubelet{want: len(n.plugin.Resources()), allIn: make(chan struct{})}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	select {
	case <-k.allIn:
	case <-time.After(20 * time.Second):
		t.Fatalf("the %d resources never registered at once", k.want)
	}
}
