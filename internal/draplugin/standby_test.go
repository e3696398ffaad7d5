package draplugin_test

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// registerAt does what the kubelet's plugin watcher does with the
// registration socket at path, and returns the plugin's info.
func registerAt(t testing.TB, path string) *registerapi.PluginInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := registerapi.NewRegistrationClient(dial(t, path))
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo %s: %v", path, err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus %s: %v", path, err)
	}
	return info
}

// checkLive checks a driver's sockets as the liveness probe does.
func checkLive(t testing.TB, d *draplugin.Driver) {
	t.Helper()
	resp, err := draplugin.NewLiveness(d.RegistrarSocket(), d.DRASocket()).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness of %s: %v, %v; want SERVING", d.DRASocket(), resp, err)
	}
}

// TestStandby: a driver started in standby registers with the kubelet and
// answers its liveness calls, but publishes nothing and holds the
// kubelet's prepares until Activate; a prepare held then is served.
func TestStandby(t *testing.T) {
	claimRead := make(chan struct{}, 1)
	claims := &draplugin.Claims{DriverName: driverName, PoolName: nodeName}
	ctx, n, cfg := newNode(t, nodeOptions{sim: simnode.Options{Cards: 2}, claims: claims,
		configure: func(c *draplugin.Config) { c.Standby = true },
		api: func(c *fake.Clientset) {
			// The kubelet plugin helper reads a claim before it hands the
			// call to the driver.
			c.PrependReactor("get", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
				select {
				case claimRead <- struct{}{}:
				default:
				}
				return false, nil, nil
			})
		},
	})
	d, err := draplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	n.driver = d
	if info := n.register(t); info.Name != driverName {
		t.Fatalf("registration in standby: %+v", info)
	}
	checkLive(t, d) // an empty prepare is answered at once

	pn := &preparingNode{testNode: n}
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	dra := n.draClient(t)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = dra.NodePrepareResources(short, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(c)}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("prepare in standby: %v, want it held until its deadline", err)
	}
	select {
	case <-claimRead: // that call's read
	default:
	}
	if _, ok := n.State.Claim(c.UID); ok || n.Programmer.TotalCalls() != 0 {
		t.Fatal("a driver in standby prepared a claim")
	}
	for _, a := range n.client.Actions() {
		if a.GetResource().Resource == "resourceslices" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Fatalf("a driver in standby wrote ResourceSlices: %s", a.GetVerb())
		}
	}

	held := make(chan *drapbv1.NodePrepareResourceResponse, 1)
	go func() {
		resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(c)}})
		if err != nil {
			t.Errorf("held prepare: %v", err)
			held <- nil
			return
		}
		held <- resp.Claims[string(c.UID)]
	}()
	<-claimRead // the call reached the plugin
	d.Activate(claims, nil)
	if r := <-held; r == nil || r.Error != "" || len(r.Devices) != 1 {
		t.Fatalf("prepare held over Activate: %+v", r)
	}
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(deviceNames(s)) == 2 })
}

// TestRollingUpdate: two instances of the driver (the pods of a rolling
// update, told apart by their pod UIDs) run on one node's plugin
// directories: each registers with its own sockets and answers liveness;
// the new one, in standby, takes over the node's state when the old one
// has stopped and serves the claims the old one prepared without
// programming them again.
func TestRollingUpdate(t *testing.T) {
	claims := &draplugin.Claims{DriverName: driverName, PoolName: nodeName}
	ctx, n, cfg := newNode(t, nodeOptions{sim: simnode.Options{Cards: 2}, claims: claims,
		configure: func(c *draplugin.Config) { c.PodUID = "pod-old" }})
	old, err := draplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Stop)
	n.driver = old
	pn := &preparingNode{testNode: n}
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	first := pn.prepare(t, drapbv1.NewDRAPluginClient(dial(t, old.DRASocket())), c)
	if first.Error != "" {
		t.Fatal(first.Error)
	}

	next := cfg
	next.PodUID, next.Standby, next.Claims, next.Events = types.UID("pod-new"), true, nil, nil
	d, err := draplugin.Start(ctx, next)
	if err != nil {
		t.Fatalf("start the second instance: %v", err)
	}
	t.Cleanup(d.Stop)
	if d.RegistrarSocket() == old.RegistrarSocket() || d.DRASocket() == old.DRASocket() {
		t.Fatalf("the instances share sockets: %s %s", d.RegistrarSocket(), d.DRASocket())
	}
	for _, inst := range []*draplugin.Driver{old, d} {
		info := registerAt(t, inst.RegistrarSocket())
		if info.Name != driverName || info.Endpoint != inst.DRASocket() {
			t.Fatalf("registration at %s: %+v, want endpoint %s", inst.RegistrarSocket(), info, inst.DRASocket())
		}
		checkLive(t, inst)
	}

	// The old pod stops; the new one loads the node's state and serves.
	old.Stop()
	if _, err := os.Stat(old.RegistrarSocket()); !os.IsNotExist(err) {
		t.Fatalf("the stopped instance's registration socket is left: %v", err)
	}
	checkLive(t, d)
	node := testnode.New(t, testnode.Options{Restart: n.Node})
	d.Activate(&draplugin.Claims{DriverName: driverName, PoolName: nodeName, State: node.State}, nil)
	dra := drapbv1.NewDRAPluginClient(dial(t, d.DRASocket()))
	again := pn.prepare(t, dra, c)
	if again.Error != "" || len(again.Devices) != 1 || again.Devices[0].CdiDeviceIds[0] != first.Devices[0].CdiDeviceIds[0] {
		t.Fatalf("the new instance's prepare of a claim the old one prepared: %+v, want %+v", again, first)
	}
	if calls := node.Programmer.TotalCalls(); calls != 0 {
		t.Fatalf("the new instance programmed the region again (%d calls)", calls)
	}
	pn.unprepare(t, dra, c)
	if _, ok := node.State.Claim(c.UID); ok {
		t.Fatal("claim still recorded after the new instance unprepared it")
	}
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(s) == 1 && len(deviceNames(s)) == 2 })
}
