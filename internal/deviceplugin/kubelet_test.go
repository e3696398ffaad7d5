package deviceplugin_test

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

const (
	intelDomain = "fpga.intel.com"
	cdiVendor   = "fpga.dra.dev"
	// The Intel FPGA device plugin's test fixture (fpga-facts.md), which
	// the simulated node carries by default.
	fixtureAF0    = "af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs"
	fixtureAF1    = "af-695.f7d.aVKNtusxV3qMNmj5-qCB9vffQFy9es9yIvFEsLk6zRg"
	fixtureRegion = "region-69528db6eb31577a8c3668f9faa081f6"
)

// testKubelet is the kubelet's device manager as a device plugin sees it:
// a Registration gRPC server on <dir>/kubelet.sock.
type testKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir  string
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest
}

func startKubelet(t testing.TB, dir string) *testKubelet {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(dir, deviceplugin.KubeletSocket))
	if err != nil {
		t.Fatal(err)
	}
	k := &testKubelet{dir: dir, srv: grpc.NewServer(), regs: make(chan *pluginapi.RegisterRequest, 100)}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(lis) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *testKubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.regs <- req
	return &pluginapi.Empty{}, nil
}

// restart does what a kubelet restart does to the directory: the old
// kubelet goes away, the new one deletes every file in the directory and
// then serves a new kubelet.sock.
func (k *testKubelet) restart(t testing.TB) *testKubelet {
	t.Helper()
	k.srv.Stop()
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return startKubelet(t, k.dir)
}

// waitRegistrations waits until n distinct resources registered and
// returns their requests by resource name.
func (k *testKubelet) waitRegistrations(t testing.TB, n int) map[string]*pluginapi.RegisterRequest {
	t.Helper()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	got := map[string]*pluginapi.RegisterRequest{}
	for len(got) < n {
		select {
		case r := <-k.regs:
			got[r.ResourceName] = r
		case <-timeout.C:
			t.Fatalf("only %d of %d resources registered: %v", len(got), n, keys(got))
		}
	}
	return got
}

// keys returns a map's keys, sorted.
func keys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// testNode is a running endpoint on a simulated node (internal/testnode)
// with a real State and a test kubelet in front of it.
type testNode struct {
	sim     *simnode.Node
	state   *state.State
	plugin  *deviceplugin.Plugin
	kubelet *testKubelet
	// dir is the device-plugin directory, cdiDir the CDI spec directory.
	dir    string
	cdiDir string
}

type nodeOptions struct {
	sim        simnode.Options
	mode       deviceplugin.Mode
	domain     string
	cdi        bool
	hookDevice string
	// before runs on the state and the simulated node before the
	// endpoint starts.
	before func(*state.State, *discovery.Result, *simnode.Node)
	// quiet discards the endpoint's logs (benchmarks).
	quiet bool
	// lateKubelet starts the endpoint before the kubelet; noKubelet
	// starts none (the test brings its own).
	lateKubelet, noKubelet bool
}

func startNode(t testing.TB, o nodeOptions) *testNode {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	if o.quiet {
		ctx = klog.NewContext(ctx, klog.Background().V(100))
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if o.mode == "" {
		o.mode = deviceplugin.ModeAF
	}
	if o.domain == "" {
		o.domain = intelDomain
	}
	tn := testnode.New(t, testnode.Options{Sim: o.sim})
	n := &testNode{sim: tn.Sim, state: tn.State, dir: filepath.Join(filepath.Dir(tn.DataDir), "dp"), cdiDir: tn.CDIDir}
	if err := os.MkdirAll(n.dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if o.before != nil {
		o.before(n.state, tn.Devices(t), tn.Sim)
	}
	if !o.lateKubelet && !o.noKubelet {
		n.kubelet = startKubelet(t, n.dir)
	}
	var err error
	n.plugin, err = deviceplugin.Start(ctx, deviceplugin.Config{
		Domain:          o.domain,
		Mode:            o.mode,
		Dir:             n.dir,
		Scanner:         tn.Scanner,
		RefreshInterval: time.Hour, // tests refresh explicitly
		State:           n.state,
		CDI:             o.cdi,
		HookDevice:      o.hookDevice,
		CheckInterval:   time.Hour, // only file-system events drive re-registration
	})
	if err != nil {
		t.Fatalf("start device plugin: %v", err)
	}
	t.Cleanup(n.plugin.Stop)
	if o.lateKubelet && !o.noKubelet {
		n.kubelet = startKubelet(t, n.dir)
	}
	return n
}

// client dials the endpoint a registration names, as the kubelet does.
func (n *testNode) client(t testing.TB, reg *pluginapi.RegisterRequest) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.dir, reg.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// watch opens ListAndWatch and returns a function that reads the next
// device list.
func watch(t testing.TB, c pluginapi.DevicePluginClient) func() []*pluginapi.Device {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("ListAndWatch: %v", err)
	}
	type result struct {
		resp *pluginapi.ListAndWatchResponse
		err  error
	}
	ch := make(chan result)
	go func() {
		for {
			resp, err := stream.Recv()
			select {
			case ch <- result{resp, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return func() []*pluginapi.Device {
		t.Helper()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("ListAndWatch: %v", r.err)
			}
			return r.resp.Devices
		case <-time.After(20 * time.Second):
			t.Fatal("ListAndWatch sent nothing")
			return nil
		}
	}
}

// allocate calls Allocate for one container.
func allocate(t testing.TB, c pluginapi.DevicePluginClient, ids ...string) (*pluginapi.ContainerAllocateResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		t.Fatalf("Allocate returned %d container responses, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0], nil
}
