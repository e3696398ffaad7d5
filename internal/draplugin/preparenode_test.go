package draplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// NewAFU is an AFU no simulated port carries until it is programmed.
const NewAFU = testnode.NewAFU

// preparingNode is a testNode whose driver prepares claims on a real
// State with a simulated programmer and a bitstream repository.
type preparingNode struct {
	*testNode
	state     *state.State
	sim       *program.SimProgrammer
	stateWarn error
	uid       atomic.Int64
	metrics   *drivermetrics.Metrics
}

type preparingOptions struct {
	sim         simnode.Options
	restart     *preparingNode
	prepareWait time.Duration
	programmer  *program.SimProgrammer
	// node adds to the node's options (hooks, waits).
	node testnode.Options
	// deviceMetadata: see nodeOptions.
	deviceMetadata bool
}

func startPreparingNode(t testing.TB, o preparingOptions) *preparingNode {
	t.Helper()
	pn := &preparingNode{metrics: drivermetrics.New()}
	var restart *testNode
	if o.restart != nil {
		restart = o.restart.testNode
		pn.uid.Store(o.restart.uid.Load())
	}
	var driver atomic.Pointer[draplugin.Driver]
	claims := &draplugin.Claims{DriverName: driverName, PoolName: nodeName, Metrics: pn.metrics}
	node := o.node
	node.Programmer, node.PrepareWait = o.programmer, o.prepareWait
	node.OnProgrammed = func(p state.Programming) {
		pn.metrics.ObserveProgramming(p.Err, p.Duration)
		if d := driver.Load(); d != nil {
			d.RefreshDevices()
		}
	}
	// As the daemon wires it (cmd/fpga-dra-driver).
	node.OnRenumbered = func() {
		if d := driver.Load(); d != nil {
			d.Republish()
		}
	}
	pn.testNode = startNode(t, nodeOptions{sim: o.sim, node: node, restart: restart, claims: claims, deviceMetadata: o.deviceMetadata, configure: func(c *draplugin.Config) {
		c.Metrics = pn.metrics
		broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: c.KubeClient.EventsV1()})
		broadcaster.StartRecordingToSink(context.Background().Done())
		t.Cleanup(broadcaster.Shutdown)
		claims.Recorder = broadcaster.NewRecorder(scheme.Scheme, "fpga-dra-driver")
	}})
	pn.state, pn.stateWarn, pn.sim = pn.State, pn.StateWarning, pn.Programmer
	driver.Store(pn.driver)
	return pn
}

func fpgaConfig(t testing.TB, cfg v1alpha1.FpgaConfig) runtime.RawExtension {
	t.Helper()
	cfg.APIVersion = v1alpha1.SchemeGroupVersion.String()
	cfg.Kind = v1alpha1.FpgaConfigKind
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

// claim creates an allocated ResourceClaim in the API server, one request
// "fpga-<i>" per device, with the given opaque configs from the claim.
func (pn *preparingNode) claim(t testing.TB, devices []string, configs ...runtime.RawExtension) *resourceapi.ResourceClaim {
	t.Helper()
	id := pn.uid.Add(1)
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("claim-%d", id), UID: types.UID(fmt.Sprintf("uid-%d", id))},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for i, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: fmt.Sprintf("fpga-%d", i), Driver: driverName, Pool: nodeName, Device: d,
		})
	}
	for _, raw := range configs {
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source:              resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driverName, Parameters: raw}},
		})
	}
	created, err := pn.client.ResourceV1().ResourceClaims("default").Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func protoClaim(c *resourceapi.ResourceClaim) *drapbv1.Claim {
	return &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

// prepare calls NodePrepareResources over the socket, as the kubelet does,
// and returns the claim's result.
func (pn *preparingNode) prepare(t testing.TB, dra drapbv1.DRAPluginClient, c *resourceapi.ResourceClaim) *drapbv1.NodePrepareResourceResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(c)}})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	r := resp.Claims[string(c.UID)]
	if r == nil {
		t.Fatalf("no result for claim %s", c.UID)
	}
	return r
}

func (pn *preparingNode) unprepare(t testing.TB, dra drapbv1.DRAPluginClient, c *resourceapi.ResourceClaim) {
	t.Helper()
	resp, err := dra.NodeUnprepareResources(context.Background(), &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(c)}})
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	if r := resp.Claims[string(c.UID)]; r == nil || r.Error != "" {
		t.Fatalf("unprepare %s: %+v", c.Name, r)
	}
}

// claimEvents lists the reasons of events recorded on a claim, waiting
// until want appears (events are sent asynchronously).
func (pn *preparingNode) waitEvent(t testing.TB, c *resourceapi.ResourceClaim, reason string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := pn.client.EventsV1().Events(c.Namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		list, err := pn.client.EventsV1().Events(c.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Regarding.UID == c.UID && e.Reason == reason {
				return e.Note
			}
		}
		select {
		case <-w.ResultChan():
		case <-ctx.Done():
			t.Fatalf("no %s event on claim %s", reason, c.Name)
		}
	}
}

func afuOf(s []resourceapi.ResourceSlice, device string) string {
	for _, sl := range s {
		for _, d := range sl.Spec.Devices {
			if v := d.Attributes[driverName+"/"+deviceslice.AttrAFUID].StringValue; d.Name == device && v != nil {
				return *v
			}
		}
	}
	return ""
}

// writeBitstream writes a simulated-programmer GBS named name into dir and
// returns its path.
func writeBitstream(t testing.TB, dir, name, interfaceID, afuID string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	testnode.WriteBitstream(t, path, interfaceID, afuID)
	return path
}
