package draplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

const (
	driverName = "fpga.dra.dev"
	nodeName   = "worker-1"
)

// testNode is a running driver on a simulated node, with a fake API server
// behind it and a test kubelet in front of it.
type testNode struct {
	*testnode.Node
	sim    *simnode.Node
	client *fake.Clientset
	driver *draplugin.Driver
	regDir string
	// dataDir is the plugin data directory (sockets, checkpoint).
	dataDir string
	// uevent sends a kernel-format uevent to the driver's watcher.
	uevent func(action, devpath, subsystem string)
}

type nodeOptions struct {
	sim simnode.Options
	// node shapes the node's state (programmer, waits, hooks).
	node testnode.Options
	// restart reuses an earlier node's tree, directories and API server.
	restart *testNode
	claims  draplugin.ClaimPreparer
	// configure adjusts the driver config before start.
	configure func(*draplugin.Config)
	// api adjusts the fake API server (reactors) before start.
	api func(*fake.Clientset)
	// deviceMetadata turns device metadata on (the daemon's default), its
	// CDI specs beside the claims' specs as on a node.
	deviceMetadata bool
}

func startNode(t testing.TB, o nodeOptions) *testNode {
	t.Helper()
	ctx, n, cfg := newNode(t, o)
	d, err := draplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start driver: %v", err)
	}
	t.Cleanup(d.Stop)
	n.driver = d
	return n
}

// newNode builds the simulated node (internal/testnode), the directories
// and the fake API server startNode starts a driver on, and returns that
// driver's config.
func newNode(t testing.TB, o nodeOptions) (context.Context, *testNode, draplugin.Config) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	tn := o.node
	tn.Sim = o.sim
	var n *testNode
	if o.restart != nil {
		tn.Restart = o.restart.Node
		n = &testNode{Node: testnode.New(t, tn), client: o.restart.client, regDir: o.restart.regDir}
	} else {
		n = &testNode{
			Node:   testnode.New(t, tn),
			client: fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}),
		}
		generateNames(n.client)
		n.regDir = filepath.Join(filepath.Dir(n.DataDir), "reg")
		if err := os.MkdirAll(n.regDir, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	n.sim, n.dataDir = n.Sim, n.DataDir
	if c, ok := o.claims.(*draplugin.Claims); ok && c.State == nil {
		c.State = n.State // claims prepare on the node's state
	}
	if o.api != nil {
		o.api(n.client)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	events, err := discovery.NewUeventSourceFD(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	n.uevent = func(action, devpath, subsystem string) {
		msg := fmt.Sprintf("%s@%s\x00ACTION=%s\x00DEVPATH=%s\x00SUBSYSTEM=%s\x00", action, devpath, action, devpath, subsystem)
		if _, err := unix.Write(fds[1], []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := draplugin.Config{
		DriverName:      driverName,
		NodeName:        nodeName,
		KubeClient:      n.client,
		RegistrarDir:    n.regDir,
		PluginDataDir:   n.dataDir,
		Scanner:         &discovery.Scanner{Root: n.sim.Root},
		Events:          events,
		RefreshInterval: time.Hour, // tests trigger refreshes explicitly
		Programmable:    true,
		Claims:          o.claims,
	}
	if o.deviceMetadata {
		cfg.DeviceMetadata, cfg.CDIDir = true, n.CDIDir
	}
	if o.configure != nil {
		o.configure(&cfg)
	}
	return ctx, n, cfg
}

// generateNames makes the fake API server name and identify created
// objects as a real one does (metadata.generateName, metadata.uid), and
// store nothing for a dry run.
func generateNames(c *fake.Clientset) {
	var seq atomic.Int64
	c.PrependReactor("create", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		create := action.(k8stesting.CreateAction)
		obj := create.GetObject()
		if ca, ok := create.(k8stesting.CreateActionImpl); ok && slices.Contains(ca.CreateOptions.DryRun, metav1.DryRunAll) {
			return true, obj, nil
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return false, nil, nil
		}
		i := seq.Add(1)
		if m.GetName() == "" && m.GetGenerateName() != "" {
			m.SetName(fmt.Sprintf("%s%05d", m.GetGenerateName(), i))
		}
		if m.GetUID() == "" {
			m.SetUID(types.UID(fmt.Sprintf("generated-uid-%d", i)))
		}
		return false, nil, nil
	})
}

func dial(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// register does what the kubelet's plugin watcher does: GetInfo on the
// registration socket, then NotifyRegistrationStatus. It returns the info.
func (n *testNode) register(t testing.TB) *registerapi.PluginInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := registerapi.NewRegistrationClient(dial(t, filepath.Join(n.regDir, driverName+"-reg.sock")))
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	return info
}

func (n *testNode) draClient(t testing.TB) drapbv1.DRAPluginClient {
	return drapbv1.NewDRAPluginClient(dial(t, filepath.Join(n.dataDir, "dra.sock")))
}

func (n *testNode) healthClient(t testing.TB) drahealthv1.DRAResourceHealthClient {
	return drahealthv1.NewDRAResourceHealthClient(dial(t, filepath.Join(n.dataDir, "dra.sock")))
}

// waitSlices watches the fake API server until the node's ResourceSlices
// satisfy ok, and returns them.
func (n *testNode) waitSlices(t testing.TB, ok func([]resourceapi.ResourceSlice) bool) []resourceapi.ResourceSlice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := n.client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		list, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Predicates may index the first slice: an empty list (between a
		// delete and a create) never satisfies them.
		if len(list.Items) > 0 && ok(list.Items) {
			return list.Items
		}
		select {
		case ev, open := <-w.ResultChan():
			if !open || ev.Type == watch.Error {
				t.Fatalf("slice watch ended: %v", ev)
			}
		case <-ctx.Done():
			t.Fatalf("ResourceSlices never reached the expected state; last: %+v", list.Items)
		}
	}
}

func deviceNames(slices []resourceapi.ResourceSlice) []string {
	var names []string
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	return names
}
