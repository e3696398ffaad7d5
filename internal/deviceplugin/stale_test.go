package deviceplugin_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// podResources is the kubelet's pod-resources service as a test serves
// it: the pods it lists are set by the test.
type podResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	mu    sync.Mutex
	pods  []*podresourcesv1.PodResources
	err   error
	calls int
	// listed, when not nil, receives a value after each List.
	listed chan struct{}
	// during, when not nil, runs in each List before it answers.
	during func()
}

func (p *podResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.during != nil {
		p.during()
	}
	if p.listed != nil {
		defer func() { p.listed <- struct{}{} }()
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: p.pods}, p.err
}

func (p *podResources) set(err error, pods ...*podresourcesv1.PodResources) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods, p.err = pods, err
}

func pod(name, resource string, ids ...string) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Name: name, Namespace: "default", Containers: []*podresourcesv1.ContainerResources{{
		Name:    "c",
		Devices: []*podresourcesv1.ContainerDevices{{ResourceName: resource, DeviceIds: ids}},
	}}}
}

// servePodResources serves p on a unix socket in dir and returns the
// socket and a client of it.
func servePodResources(t *testing.T, dir string, p *podResources) (string, podresourcesv1.PodResourcesListerClient) {
	t.Helper()
	socket := filepath.Join(dir, "pr.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, p)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return socket, podresourcesv1.NewPodResourcesListerClient(conn)
}

// TestReleaseStale: legacy holds from Allocate calls are released once two
// lists of the kubelet's pod-resources API in a row show no container with
// their ports, and a DRA claim can then prepare the port.
func TestReleaseStale(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := startNode(t, nodeOptions{cdi: true})
	regs := n.kubelet.waitRegistrations(t, 2)
	r0, r1 := intelDomain+"/"+fixtureAF0, intelDomain+"/"+fixtureAF1
	if _, err := allocate(t, n.client(t, regs[r0]), "dfl-port.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := allocate(t, n.client(t, regs[r1]), "dfl-port.1"); err != nil {
		t.Fatal(err)
	}
	n.plugin.Stop() // the node now serves DRA
	const p0, p1 = "fpga-0000-01-00-0-p0", "fpga-0000-02-00-0-p0"
	h0, h1 := types.UID("deviceplugin-af-"+p0), types.UID("deviceplugin-af-"+p1)
	if got := deviceplugin.LegacyHolders(n.state); !slices.Equal(got, []types.UID{h0, h1}) {
		t.Fatalf("legacy holders %v", got)
	}
	pr := &podResources{}
	_, client := servePodResources(t, n.dir, pr)
	devs := n.plugin.Devices()
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client}
	pass := func(want ...types.UID) {
		t.Helper()
		got, err := r.Pass(ctx, devs)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("released %v (%v), want %v", got, err, want)
		}
	}

	// A kubelet that has just restarted lists nothing: one such list
	// releases nothing.
	pass()
	// The API fails: nothing is released, and the failure confirms nothing.
	pr.set(status.Error(codes.Unavailable, "kubelet restarting"))
	if got, err := r.Pass(ctx, devs); err == nil || len(got) != 0 {
		t.Fatalf("Pass with a failing API: %v, %v", got, err)
	}
	// Port 0 is still in a container under its resource; port 1 is in one
	// only under another resource name (not this holder's allocation).
	pr.set(nil, pod("a", r0, "dfl-port.0"), pod("b", "example.com/other", "dfl-port.1"))
	pass(h1) // unused in two lists in a row
	if h := n.state.Holders(); h[p0] != h0 || h[p1] != "" {
		t.Fatalf("holders %v", h)
	}
	if specs := specFiles(t, n); len(specs) != 1 || !strings.Contains(specs[0], p0) {
		t.Errorf("CDI specs %v, want only %s's", specs, h0)
	}
	claim := state.Holder{UID: "0e7f4a3b-1c2d-4e5f-8a9b-0c1d2e3f4a5b", Namespace: "default", Name: "claim-1"}
	if _, err := n.state.Prepare(ctx, claim, []state.DeviceRequest{{Device: p1}}, devs); err != nil {
		t.Fatalf("DRA prepare of the released port: %v", err)
	}
	if _, err := n.state.Prepare(ctx, claim, []state.DeviceRequest{{Device: p0}}, devs); !errors.Is(err, state.ErrDeviceHeld) {
		t.Fatalf("DRA prepare of the port a container still has: %v, want ErrDeviceHeld", err)
	}
	// A device ID discovery does not know (a card that failed discovery)
	// keeps the holds of its resource.
	pr.set(nil, pod("a", r0, "dfl-port.9"))
	pass()
	pass()
	// The pod ends.
	pr.set(nil)
	pass()
	pass(h0)
	// Nothing left: the API is not asked again.
	calls := pr.calls
	pass()
	if pr.calls != calls {
		t.Fatalf("listed pod resources with no legacy holder left")
	}
}

// TestReleaseStaleRegionMode: in region mode the kubelet's device ID is the
// card's FME; a container that has it keeps the card's ports held, and the
// other card's hold goes.
func TestReleaseStaleRegionMode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := startNode(t, nodeOptions{mode: deviceplugin.ModeRegion})
	regs := n.kubelet.waitRegistrations(t, 1)
	c := n.client(t, regs[intelDomain+"/"+fixtureRegion])
	for _, fme := range []string{"dfl-fme.0", "dfl-fme.1"} {
		if _, err := allocate(t, c, fme); err != nil {
			t.Fatal(err)
		}
	}
	n.plugin.Stop()
	held := deviceplugin.LegacyHolders(n.state)
	if len(held) != 2 {
		t.Fatalf("legacy holders %v, want one per card", held)
	}
	pr := &podResources{}
	_, client := servePodResources(t, n.dir, pr)
	pr.set(nil, pod("a", intelDomain+"/"+fixtureRegion, "dfl-fme.0"))
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client}
	released := twoPasses(ctx, t, r, n.plugin.Devices())
	if left := deviceplugin.LegacyHolders(n.state); len(released) != 1 || len(left) != 1 || left[0] == released[0] ||
		n.state.Holders()["fpga-0000-01-00-0-p0"] != left[0] {
		t.Fatalf("released %v, left %v: want card 1 (dfl-fme.0, in a container) held and card 2 released", released, left)
	}
}

// TestReleaseStaleHolds runs the loop until the last legacy hold is gone.
func TestReleaseStaleHolds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := startNode(t, nodeOptions{})
	regs := n.kubelet.waitRegistrations(t, 2)
	if _, err := allocate(t, n.client(t, regs[intelDomain+"/"+fixtureAF0]), "dfl-port.0"); err != nil {
		t.Fatal(err)
	}
	n.plugin.Stop()
	pr := &podResources{listed: make(chan struct{})}
	socket, _ := servePodResources(t, n.dir, pr)
	pr.set(nil, pod("a", intelDomain+"/"+fixtureAF0, "dfl-port.0"))
	devs := n.plugin.Devices()
	done := make(chan struct{})
	go func() {
		defer close(done)
		deviceplugin.ReleaseStaleHolds(ctx, n.state, socket, time.Millisecond, func() *discovery.Result { return devs }, nil, "")
	}()
	// The loop asks again and again and keeps the hold while the pod runs.
	for range 3 {
		<-pr.listed
	}
	if len(deviceplugin.LegacyHolders(n.state)) != 1 {
		t.Fatal("released while the pod runs")
	}
	// The pod ends: the loop releases the hold and returns.
	pr.set(nil)
	go func() {
		for range pr.listed {
		}
	}()
	<-done
	close(pr.listed) // the loop returned: no more List calls
	if h := deviceplugin.LegacyHolders(n.state); len(h) != 0 {
		t.Fatalf("holders left: %v", h)
	}
}

// TestReleaseStaleOnly: while the endpoint serves, only holds of resources
// it does not serve (an earlier mode's) are released once no container
// has their ports; a hold of a served resource stays for the next
// Allocate to supersede, however long no container lists it.
func TestReleaseStaleOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := startNode(t, nodeOptions{})
	regs := n.kubelet.waitRegistrations(t, 2)
	r0, r1 := intelDomain+"/"+fixtureAF0, intelDomain+"/"+fixtureAF1
	for r, port := range map[string]string{r0: "dfl-port.0", r1: "dfl-port.1"} {
		if _, err := allocate(t, n.client(t, regs[r]), port); err != nil {
			t.Fatal(err)
		}
	}
	h1 := types.UID("deviceplugin-af-fpga-0000-02-00-0-p0")
	pr := &podResources{}
	_, client := servePodResources(t, n.dir, pr)
	// r1 stands for a resource of an earlier mode.
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client, Only: func(resource string, _ []string) bool { return resource == r1 }}
	released := twoPasses(ctx, t, r, n.plugin.Devices())
	if !slices.Equal(released, []types.UID{h1}) || len(deviceplugin.LegacyHolders(n.state)) != 1 {
		t.Fatalf("released %v, left %v: want only %s (resource %s) released", released, deviceplugin.LegacyHolders(n.state), h1, r1)
	}
}

// twoPasses runs two passes of r (a release needs two lists in a row) and
// returns what they released.
func twoPasses(ctx context.Context, t *testing.T, r *deviceplugin.StaleReleaser, devs *discovery.Result) []types.UID {
	t.Helper()
	var released []types.UID
	for range 2 {
		got, err := r.Pass(ctx, devs)
		if err != nil {
			t.Fatal(err)
		}
		released = append(released, got...)
	}
	return released
}

// TestReleaseStaleNeedsOwnPod: with Self set, a pod-resources list that
// lacks the daemon's own pod (a kubelet that restarted and has not synced
// its pods, while the containers it had run on) releases nothing and
// confirms nothing, however often it comes; once the kubelet lists the
// daemon's pod, two lists in a row without a container release the hold.
func TestReleaseStaleNeedsOwnPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := startNode(t, nodeOptions{})
	regs := n.kubelet.waitRegistrations(t, 2)
	if _, err := allocate(t, n.client(t, regs[intelDomain+"/"+fixtureAF0]), "dfl-port.0"); err != nil {
		t.Fatal(err)
	}
	n.plugin.Stop() // the node now serves DRA
	h0 := types.UID("deviceplugin-af-fpga-0000-01-00-0-p0")
	pr := &podResources{}
	_, client := servePodResources(t, n.dir, pr)
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client, Self: "fpga-dra-driver/fpga-dra-driver-kubelet-plugin-x1"}
	devs := n.plugin.Devices()
	for range 3 {
		if got, err := r.Pass(ctx, devs); err == nil || len(got) != 0 || !strings.Contains(err.Error(), r.Self) {
			t.Fatalf("a list without the daemon's own pod: released %v, error %v; want nothing released and an error naming %s", got, err, r.Self)
		}
	}
	pr.set(nil, &podresourcesv1.PodResources{Namespace: "fpga-dra-driver", Name: "fpga-dra-driver-kubelet-plugin-x1"})
	if released := twoPasses(ctx, t, r, devs); !slices.Equal(released, []types.UID{h0}) {
		t.Fatalf("released %v once the kubelet lists the daemon's pod, want %s after two lists", released, h0)
	}
}

// TestReleaseStaleKeepsRecoveredHold: a hold rebuilt from its CDI spec
// after a damaged checkpoint names no resource; a container that has its
// port, under whichever resource, keeps it held.
func TestReleaseStaleKeepsRecoveredHold(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := startNode(t, nodeOptions{})
	const p0 = "fpga-0000-01-00-0-p0"
	h := state.Holder{UID: "deviceplugin-af-" + p0} // as a record rebuilt from a spec
	if _, err := n.state.Prepare(ctx, h, []state.DeviceRequest{{Device: p0, Requests: []string{"dfl-port.0"}}}, n.plugin.Devices()); err != nil {
		t.Fatal(err)
	}
	pr := &podResources{}
	pr.set(nil, pod("a", intelDomain+"/"+fixtureAF0, "dfl-port.0"))
	_, client := servePodResources(t, n.dir, pr)
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client}
	if released := twoPasses(ctx, t, r, n.plugin.Devices()); len(released) > 0 {
		t.Fatalf("released %v while a container has port dfl-port.0", released)
	}
	pr.set(nil)
	if released := twoPasses(ctx, t, r, n.plugin.Devices()); !slices.Equal(released, []types.UID{h.UID}) {
		t.Fatalf("released %v once no container has the port, want %s", released, h.UID)
	}
}

// TestReleaseStaleAFUChanged: while the endpoint serves, a hold made for
// an af resource on a port that no longer carries that resource's AFU
// (reset or reprogrammed under its container) is released once no
// container has the port, although the resource is still served by
// another port: no Allocate of that resource can take the port over.
func TestReleaseStaleAFUChanged(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const p0 = "fpga-0000-01-00-0-p0"
	old := state.Holder{UID: "deviceplugin-af-" + p0, Namespace: deviceplugin.LegacyNamespace, Name: intelDomain + "/" + fixtureAF0}
	n := startNode(t, nodeOptions{
		// Port 0 carries the second AFU now, port 1 the first.
		sim:  simnode.Options{Cards: 1, PortsPerCard: 2, AFUIDs: []string{simnode.SecondAFUID, simnode.DefaultAFUID}},
		mode: deviceplugin.ModeAF, cdi: true,
		before: func(st *state.State, res *discovery.Result, _ *simnode.Node) {
			if _, err := st.Prepare(context.Background(), old, []state.DeviceRequest{{Device: p0, Requests: []string{"dfl-port.0"}}}, res); err != nil {
				t.Fatal(err)
			}
		},
	})
	n.kubelet.waitRegistrations(t, 2)
	if !n.plugin.Serves(old.Name) {
		t.Fatalf("resource %s is not served", old.Name)
	}
	pr := &podResources{}
	pr.set(nil, pod("a", old.Name, "dfl-port.0"))
	_, client := servePodResources(t, n.dir, pr)
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client, Only: n.plugin.Releasable}
	if released := twoPasses(ctx, t, r, n.plugin.Devices()); len(released) > 0 {
		t.Fatalf("released %v while its container has the port", released)
	}
	pr.set(nil)
	if released := twoPasses(ctx, t, r, n.plugin.Devices()); !slices.Equal(released, []types.UID{old.UID}) {
		t.Fatalf("released %v once no container has the port, want %s", released, old.UID)
	}
}

// TestReleaseStaleAllocatedMeanwhile: an Allocate of a holder's port for a
// new container, which the kubelet's list may not show yet, keeps the
// hold: one between two lists (the second may still miss the container),
// and one while the list that would confirm the release is being made.
func TestReleaseStaleAllocatedMeanwhile(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := startNode(t, nodeOptions{})
	regs := n.kubelet.waitRegistrations(t, 2)
	r0 := intelDomain + "/" + fixtureAF0
	c := n.client(t, regs[r0])
	if _, err := allocate(t, c, "dfl-port.0"); err != nil {
		t.Fatal(err)
	}
	h0 := types.UID("deviceplugin-af-fpga-0000-01-00-0-p0")
	pr := &podResources{}
	_, client := servePodResources(t, n.dir, pr)
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client}
	devs := n.plugin.Devices()
	pass := func(what string) {
		t.Helper()
		got, err := r.Pass(ctx, devs)
		if err != nil || len(got) > 0 || !slices.Equal(deviceplugin.LegacyHolders(n.state), []types.UID{h0}) {
			t.Fatalf("%s: released %v (%v), holders %v; want %s kept", what, got, err, deviceplugin.LegacyHolders(n.state), h0)
		}
	}

	pass("first list without a container")
	if _, err := allocate(t, c, "dfl-port.0"); err != nil {
		t.Fatal(err)
	}
	pass("second list, missing the container allocated after the first")
	pr.during = func() {
		pr.during = nil
		if _, err := allocate(t, c, "dfl-port.0"); err != nil {
			t.Error(err)
		}
	}
	pass("a list made while a container is allocated the port")
	// Two lists after the last Allocate, both without a container.
	pass("first list after the last Allocate")
	if got, err := r.Pass(ctx, devs); err != nil || !slices.Equal(got, []types.UID{h0}) {
		t.Fatalf("second list after the last Allocate: released %v (%v), want %s", got, err, h0)
	}
}

// TestReleasedHoldAdvertisedHealthyAgain: a port an earlier mode's
// container holds is advertised unhealthy under the resource it is in now;
// once the stale-hold releaser has released that hold (no container has
// the port any more), ListAndWatch reports the port healthy again. The
// kubelet never allocates a device it was last told is unhealthy, so
// without that report the port stays unusable until some unrelated
// change of the node's devices.
func TestReleasedHoldAdvertisedHealthyAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const p0 = "fpga-0000-01-00-0-p0"
	// The port carried AFU 0 when a container got it; it carries AFU 1 now.
	old := state.Holder{UID: "deviceplugin-af-" + p0, Namespace: deviceplugin.LegacyNamespace, Name: intelDomain + "/" + fixtureAF0}
	n := startNode(t, nodeOptions{
		sim:  simnode.Options{Cards: 1, PortsPerCard: 1, AFUIDs: []string{simnode.SecondAFUID}},
		mode: deviceplugin.ModeAF,
		before: func(st *state.State, res *discovery.Result, _ *simnode.Node) {
			if _, err := st.Prepare(context.Background(), old, []state.DeviceRequest{{Device: p0, Requests: []string{"dfl-port.0"}}}, res); err != nil {
				t.Fatal(err)
			}
		},
	})
	next := watch(t, n.client(t, n.kubelet.waitRegistrations(t, 1)[intelDomain+"/"+fixtureAF1]))
	if got := next(); len(got) != 1 || got[0].Health != pluginapi.Unhealthy {
		t.Fatalf("first list %v, want dfl-port.0 unhealthy (the old mode's container holds it)", got)
	}
	// The daemon's releaser, as it runs beside the endpoint.
	pr := &podResources{}
	_, client := servePodResources(t, n.dir, pr)
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client, Only: n.plugin.Releasable}
	if got := twoPasses(ctx, t, r, n.plugin.Devices()); !slices.Equal(got, []types.UID{old.UID}) {
		t.Fatalf("released %v, want %s", got, old.UID)
	}
	if got := next(); len(got) != 1 || got[0].ID != "dfl-port.0" || got[0].Health != pluginapi.Healthy {
		t.Fatalf("after the old hold was released: %v, want dfl-port.0 healthy", got)
	}
}
