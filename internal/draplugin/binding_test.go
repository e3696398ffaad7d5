package draplugin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/retry"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/claimroute"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

var (
	conditionProgrammed        = driverName + "/" + draplugin.ConditionProgrammed
	conditionProgrammingFailed = driverName + "/" + draplugin.ConditionProgrammingFailed
)

// bindingNode is a running driver that programs claims before binding:
// started in standby and activated with its claims and a Binder, as the
// daemon does, against a fake API server that behaves like a real one
// where the Binder depends on it (apiServer).
type bindingNode struct {
	*testNode
	api *apiServer
	uid atomic.Int64
	// quarantines receives the Binder's Quarantine calls.
	quarantines chan quarantineCall
	released    *releaseLog
}

type quarantineCall struct{ device, reason string }

type bindingOptions struct {
	sim simnode.Options
	// node shapes the node's state (programmer, waits); its OnStep is
	// the test's.
	node      testnode.Options
	configure func(*draplugin.Config)
	// api adjusts the fake API server (reactors) before start.
	api func(*fake.Clientset, *apiServer)
	// devices, when set, wraps the Binder's source of devices.
	devices func(func() *discovery.Result) func() *discovery.Result
	// beforeBinder, when set, runs on the node's state before the Binder
	// starts (what an earlier daemon left).
	beforeBinder func(*testNode)
}

func startBindingNode(t testing.TB, o bindingOptions) *bindingNode {
	t.Helper()
	bn := &bindingNode{quarantines: make(chan quarantineCall, 64), released: &releaseLog{done: map[types.UID]chan struct{}{}}}
	var driver atomic.Pointer[draplugin.Driver]
	node := o.node
	onStep := node.OnStep
	node.OnStep = func(step state.Step, h types.UID) {
		bn.released.step(step, h)
		if onStep != nil {
			onStep(step, h)
		}
	}
	node.OnProgrammed = func(state.Programming) {
		if d := driver.Load(); d != nil {
			d.RefreshDevices()
		}
	}
	ctx, n, cfg := newNode(t, nodeOptions{sim: o.sim, node: node,
		api: func(c *fake.Clientset) {
			bn.api = emulateAPIServer(c)
			if o.api != nil {
				o.api(c, bn.api)
			}
		},
		configure: func(c *draplugin.Config) {
			c.Standby = true
			if o.configure != nil {
				o.configure(c)
			}
		},
	})
	d, err := draplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start driver: %v", err)
	}
	t.Cleanup(d.Stop)
	n.driver = d
	driver.Store(d)
	bn.testNode = n
	claims := &draplugin.Claims{DriverName: driverName, PoolName: nodeName, State: n.State, Client: n.client,
		Slices: deviceslice.Options{Programmable: true, Root: n.sim.Root}}
	devices := d.Devices
	if o.devices != nil {
		devices = o.devices(d.Devices)
	}
	binder := &draplugin.Binder{DriverName: driverName, NodeName: nodeName, Client: n.client, Claims: claims, Devices: devices,
		Quarantine: func(device, reason string) {
			select {
			case bn.quarantines <- quarantineCall{device, reason}:
			default: // a test that races many claims does not read them
			}
			d.Quarantine(device, reason)
		},
	}
	if o.beforeBinder != nil {
		o.beforeBinder(n)
	}
	d.Activate(claims, binder)
	// The Binder sees every claim change from now on.
	bn.api.waitSelectedWatches(t, "the Binder watches", func(started, _ int) bool { return started > 0 })
	return bn
}

// releaseLog tells when the release of a holder is on disk.
type releaseLog struct {
	mu   sync.Mutex
	done map[types.UID]chan struct{}
}

func (r *releaseLog) ch(uid types.UID) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done[uid] == nil {
		r.done[uid] = make(chan struct{})
	}
	return r.done[uid]
}

func (r *releaseLog) step(step state.Step, uid types.UID) {
	if step != state.StepReleased {
		return
	}
	ch := r.ch(uid)
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// wait waits until uid's release is on disk.
func (r *releaseLog) wait(t testing.TB, uid types.UID) {
	t.Helper()
	select {
	case <-r.ch(uid):
	case <-time.After(20 * time.Second):
		t.Fatalf("the regions of claim %s were never released", uid)
	}
}

// allocation is what the scheduler writes when it allocates devices of
// this node that carry binding conditions: the results with a copy of
// the conditions, the node selector and the allocation's time (which the
// API server keeps to the second).
func allocation(at time.Time, devices []string, configs ...runtime.RawExtension) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{
		NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{nodeName},
		}}}}},
		AllocationTimestamp: &metav1.Time{Time: at.Truncate(time.Second)},
	}
	for i, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: fmt.Sprintf("fpga-%d", i), Driver: driverName, Pool: nodeName, Device: d,
			BindingConditions: []string{conditionProgrammed}, BindingFailureConditions: []string{conditionProgrammingFailed},
		})
	}
	for _, raw := range configs {
		a.Devices.Config = append(a.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source:              resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driverName, Parameters: raw}},
		})
	}
	return a
}

// claim creates a claim the scheduler allocated on this node with binding
// conditions and the controller routed to it (claimroute label).
func (bn *bindingNode) claim(t testing.TB, devices []string, configs ...runtime.RawExtension) *resourceapi.ResourceClaim {
	t.Helper()
	c, err := bn.createClaim(devices, configs...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (bn *bindingNode) createClaim(devices []string, configs ...runtime.RawExtension) (*resourceapi.ResourceClaim, error) {
	id := bn.uid.Add(1)
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("bound-%d", id), UID: types.UID(fmt.Sprintf("bound-uid-%d", id)),
			Labels: map[string]string{claimroute.Label(driverName): claimroute.Value(nodeName)}},
		Status: resourceapi.ResourceClaimStatus{Allocation: allocation(time.Now(), devices, configs...)},
	}
	return bn.client.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{})
}

// change updates a claim in the API server, as the scheduler or the
// controller does: on conflict it reads the claim again and retries.
func (bn *bindingNode) change(t testing.TB, c *resourceapi.ResourceClaim, status bool, mutate func(*resourceapi.ResourceClaim)) {
	t.Helper()
	if err := bn.update(c, status, mutate); err != nil {
		t.Fatal(err)
	}
}

func (bn *bindingNode) update(c *resourceapi.ResourceClaim, status bool, mutate func(*resourceapi.ResourceClaim)) error {
	claims := bn.client.ResourceV1().ResourceClaims(c.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := claims.Get(context.Background(), c.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(cur)
		if status {
			_, err = claims.UpdateStatus(context.Background(), cur, metav1.UpdateOptions{})
		} else {
			_, err = claims.Update(context.Background(), cur, metav1.UpdateOptions{})
		}
		return err
	})
}

// deallocate clears a claim's allocation and device status, as the
// scheduler does after a binding failure or timeout.
func (bn *bindingNode) deallocate(t testing.TB, c *resourceapi.ResourceClaim) {
	t.Helper()
	if err := bn.update(c, true, clearAllocation); err != nil {
		t.Fatal(err)
	}
}

func clearAllocation(c *resourceapi.ResourceClaim) {
	c.Status.Allocation, c.Status.Devices, c.Status.ReservedFor = nil, nil, nil
}

// deviceStatus is a device's entry in a claim's status, or nil.
func deviceStatus(c *resourceapi.ResourceClaim, device string) *resourceapi.AllocatedDeviceStatus {
	for i, d := range c.Status.Devices {
		if d.Driver == driverName && d.Pool == nodeName && d.Device == device {
			return &c.Status.Devices[i]
		}
	}
	return nil
}

// condition is a condition of a device in a claim's status, or nil.
func condition(c *resourceapi.ResourceClaim, device, typ string) *metav1.Condition {
	if d := deviceStatus(c, device); d != nil {
		return apimeta.FindStatusCondition(d.Conditions, typ)
	}
	return nil
}

// settled says the binding worker reported an outcome for device: the
// binding condition or the failure condition is True.
func settled(device string) func(*resourceapi.ResourceClaim) bool {
	return func(c *resourceapi.ResourceClaim) bool {
		for _, typ := range []string{conditionProgrammed, conditionProgrammingFailed} {
			if cond := condition(c, device, typ); cond != nil && cond.Status == metav1.ConditionTrue {
				return true
			}
		}
		return false
	}
}

func deviceData(t testing.TB, c *resourceapi.ResourceClaim, device string) draplugin.DeviceData {
	t.Helper()
	d := deviceStatus(c, device)
	if d == nil || d.Data == nil {
		t.Fatalf("claim %s has no data for %s: %+v", c.Name, device, c.Status.Devices)
	}
	var data draplugin.DeviceData
	if err := json.Unmarshal(d.Data.Raw, &data); err != nil {
		t.Fatalf("device data %s: %v", d.Data.Raw, err)
	}
	return data
}

func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestBinderProgramsBeforeBinding: a claim allocated with binding
// conditions is programmed before any kubelet call; its status says so
// with what was loaded; the kubelet's prepare later programs nothing,
// returns the CDI device and adds Ready without losing the binding
// condition or the data. The Binder found the claim watching only the
// claims routed to its node.
func TestBinderProgramsBeforeBinding(t *testing.T) {
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2}})
	c := bn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	got := bn.waitClaim(t, c, settled(dev0))

	cond := condition(got, dev0, conditionProgrammed)
	if cond.Status != metav1.ConditionTrue || cond.Reason != "Programmed" || !strings.Contains(cond.Message, NewAFU) {
		t.Fatalf("condition %s: %+v, want True, reason Programmed, naming %s", conditionProgrammed, cond, NewAFU)
	}
	if failed := condition(got, dev0, conditionProgrammingFailed); failed == nil || failed.Status != metav1.ConditionFalse {
		t.Fatalf("condition %s: %+v, want False", conditionProgrammingFailed, failed)
	}
	bitstream := filepath.Join(bn.RepoDir, "accel.gbs")
	data := deviceData(t, got, dev0)
	if data.AFUID != NewAFU || data.InterfaceID != simnode.DefaultInterfaceID || data.Bitstream != bitstream || data.SHA256 != fileSHA256(t, bitstream) {
		t.Fatalf("device data %+v, want AFU %s, interface %s, bitstream %s with its sha256", data, NewAFU, simnode.DefaultInterfaceID, bitstream)
	}
	if !slices.Equal(data.DeviceNodes, []string{"/dev/dfl-port.0"}) || data.ProgrammingSeconds <= 0 || data.ProgrammedAt == nil {
		t.Fatalf("device data %+v, want the port's device node, how long programming took and when", data)
	}
	select {
	case q := <-bn.quarantines:
		t.Fatalf("a successful programming quarantined %+v", q)
	default:
	}
	if calls := bn.Programmer.TotalCalls(); calls != 1 {
		t.Fatalf("programmed %d times before binding, want once", calls)
	}
	if rec, _ := bn.State.Claim(c.UID); rec.Phase != state.PhaseProgrammed {
		t.Fatalf("record phase %q before the kubelet's prepare, want %s", rec.Phase, state.PhaseProgrammed)
	}
	checkClaimSelectors(t, bn)

	// The pod is bound; the kubelet prepares.
	pn := &preparingNode{testNode: bn.testNode}
	r := pn.prepare(t, bn.draClient(t), c)
	if r.Error != "" || len(r.Devices) != 1 || r.Devices[0].DeviceName != dev0 {
		t.Fatalf("kubelet's prepare: %+v", r)
	}
	nodes, _ := cdiEdits(t, bn.CDIDir, r.Devices[0].CdiDeviceIds)
	if want := "/dev/dfl-port.0=" + filepath.Join(bn.sim.Root, "dev/dfl-port.0"); !slices.Equal(nodes, []string{want}) {
		t.Fatalf("CDI device nodes %v, want [%s]", nodes, want)
	}
	if calls := bn.Programmer.TotalCalls(); calls != 1 {
		t.Fatalf("the kubelet's prepare programmed again (%d calls)", calls)
	}
	if rec, _ := bn.State.Claim(c.UID); rec.Phase != state.PhaseCompleted {
		t.Fatalf("record phase %q after the kubelet's prepare, want %s", rec.Phase, state.PhaseCompleted)
	}
	// Ready is written once the kubelet has its answer.
	got = bn.waitClaim(t, c, func(c *resourceapi.ResourceClaim) bool { return readyIn(c, dev0) })
	if cond := condition(got, dev0, conditionProgrammed); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("the kubelet's prepare lost %s: %+v", conditionProgrammed, got.Status.Devices)
	}
	if after := deviceData(t, got, dev0); !reflect.DeepEqual(after, data) {
		t.Fatalf("device data after the kubelet's prepare %+v, want what the programming before binding reported: %+v", after, data)
	}
}

// TestBinderReportsProgrammingFailure: a failed programming sets the
// failure condition with a reason the scheduler's user can act on. A
// device fault (the programmer failed) quarantines the device: it is
// tainted in the published slice until QuarantineTime has passed; a fault
// of the claim (its bitstream is missing) does not, or one bad claim
// could take every region of a node out of service.
func TestBinderReportsProgrammingFailure(t *testing.T) {
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2}, configure: func(c *draplugin.Config) {
		c.QuarantineTime = time.Second // long enough to see the taint, short enough to see it go
	}})
	taint := func(s []resourceapi.ResourceSlice, device string) *resourceapi.DeviceTaint {
		for _, sl := range s {
			for _, d := range sl.Spec.Devices {
				for i, tt := range d.Taints {
					if d.Name == device && tt.Key == conditionProgrammingFailed {
						return &d.Taints[i]
					}
				}
			}
		}
		return nil
	}
	for _, tc := range []struct {
		name   string
		device string
		afu    string
		inject error
		reason string
		says   string
		// quarantined: the device is; the case after a case that
		// must not quarantine must, so that a wrong one is seen.
		quarantined bool
	}{
		{name: "bitstream not in the repository", device: dev0, afu: "44444444444444444444444444444444", reason: "BitstreamNotFound", says: "44444444444444444444444444444444"},
		{name: "programmer error", device: dev1, afu: NewAFU, inject: fmt.Errorf("injected PR error"), reason: "ProgrammingFailed", says: "injected PR error", quarantined: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.inject != nil {
				bn.Programmer.FailNext(tc.inject)
			}
			c := bn.claim(t, []string{tc.device}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: tc.afu}))
			got := bn.waitClaim(t, c, settled(tc.device))
			failed := condition(got, tc.device, conditionProgrammingFailed)
			if failed.Status != metav1.ConditionTrue || failed.Reason != tc.reason || !strings.Contains(failed.Message, tc.says) {
				t.Fatalf("condition %s: %+v, want True, reason %s, saying %q", conditionProgrammingFailed, failed, tc.reason, tc.says)
			}
			if cond := condition(got, tc.device, conditionProgrammed); cond == nil || cond.Status != metav1.ConditionFalse {
				t.Fatalf("condition %s: %+v, want False", conditionProgrammed, cond)
			}
			if !tc.quarantined {
				return
			}
			if q := <-bn.quarantines; q.device != tc.device || q.reason != tc.reason {
				t.Fatalf("quarantined %+v, want %s for %s", q, tc.device, tc.reason)
			}
			tainted := taint(bn.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return taint(s, tc.device) != nil }), tc.device)
			if tainted.Value != tc.reason || tainted.Effect != resourceapi.DeviceTaintEffectNoSchedule {
				t.Fatalf("taint %+v, want NoSchedule valued %s", tainted, tc.reason)
			}
		})
	}
	bn.waitSlices(t, func(s []resourceapi.ResourceSlice) bool {
		return taint(s, dev0) == nil && taint(s, dev1) == nil && len(deviceNames(s)) == 2
	})
	select {
	case q := <-bn.quarantines:
		t.Fatalf("quarantined %+v besides the device fault", q)
	default:
	}
	if calls := bn.Programmer.TotalCalls(); calls != 1 {
		t.Fatalf("the programmer was called %d times, want once (the failed programming, not retried)", calls)
	}
}

// TestBinderReleasesClaimsThatStopWaiting: a claim programmed before
// binding that no longer waits on this node (the scheduler deallocated it,
// it was deleted, or the controller routed it away) gives its region
// back.
func TestBinderReleasesClaimsThatStopWaiting(t *testing.T) {
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2}})
	for _, tc := range []struct {
		name  string
		leave func(t *testing.T, c *resourceapi.ResourceClaim)
	}{
		{name: "deallocated", leave: func(t *testing.T, c *resourceapi.ResourceClaim) { bn.deallocate(t, c) }},
		{name: "deleted", leave: func(t *testing.T, c *resourceapi.ResourceClaim) {
			if err := bn.client.ResourceV1().ResourceClaims(c.Namespace).Delete(context.Background(), c.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "routed away", leave: func(t *testing.T, c *resourceapi.ResourceClaim) {
			bn.change(t, c, false, func(c *resourceapi.ResourceClaim) { delete(c.Labels, claimroute.Label(driverName)) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := bn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
			bn.waitClaim(t, c, settled(dev0))
			if h := bn.State.Holders()[dev0]; h != c.UID {
				t.Fatalf("%s held by %q after programming, want %s", dev0, h, c.UID)
			}
			tc.leave(t, c)
			bn.released.wait(t, c.UID)
			if h, held := bn.State.Holders()[dev0]; held {
				t.Fatalf("%s still held by %s", dev0, h)
			}
			if _, ok := bn.State.Claim(c.UID); ok {
				t.Fatalf("claim %s still recorded", c.Name)
			}
		})
	}
}

// cancelSignal is a backend that cannot be stopped (Stubborn) and says
// when its context ends: when the claim's release begins.
type cancelSignal struct {
	testnode.Stubborn
	cancelled chan struct{}
}

func (c cancelSignal) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	go func() {
		<-ctx.Done()
		c.cancelled <- struct{}{}
	}()
	return c.Stubborn.Program(ctx, card, port, payload)
}

// TestBinderReleaseWaitsForProgramming: a claim deallocated or deleted
// while its region is being programmed keeps the region until the
// programming ended (it cannot be stopped), then frees it; no outcome is
// reported for it. A release here gives up waiting at once (ReleaseWait),
// as on a node whose programming outlasts it, and the Binder retries.
func TestBinderReleaseWaitsForProgramming(t *testing.T) {
	// Each value on gate lets one programming finish.
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	backend := cancelSignal{Stubborn: testnode.Stubborn{SimProgrammer: sim}, cancelled: make(chan struct{}, 1)}
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2}, node: testnode.Options{
		Programmer: sim, Backend: backend, ReleaseWait: time.Nanosecond,
	}})
	for _, tc := range []struct {
		name   string
		device string
		leave  func(t *testing.T, c *resourceapi.ResourceClaim)
	}{
		{name: "deallocated", device: dev0, leave: func(t *testing.T, c *resourceapi.ResourceClaim) { bn.deallocate(t, c) }},
		{name: "deleted", device: dev1, leave: func(t *testing.T, c *resourceapi.ResourceClaim) {
			if err := bn.client.ResourceV1().ResourceClaims(c.Namespace).Delete(context.Background(), c.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := bn.claim(t, []string{tc.device}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
			<-started
			tc.leave(t, c)
			<-backend.cancelled // the release began
			if h := bn.State.Holders()[tc.device]; h != c.UID {
				t.Fatalf("%s held by %q while the programming for %s runs, want %s", tc.device, h, c.Name, c.UID)
			}
			other := state.Holder{UID: "other-uid", Namespace: "default", Name: "other"}
			_, err := bn.State.Prepare(context.Background(), other, []state.DeviceRequest{{Device: tc.device, Requests: []string{"fpga"}}}, bn.driver.Devices())
			if err == nil || !strings.Contains(err.Error(), "being released") {
				t.Fatalf("another claim while the region is released: %v, want it refused as being released", err)
			}
			gate <- struct{}{}
			bn.released.wait(t, c.UID)
			if h, held := bn.State.Holders()[tc.device]; held {
				t.Fatalf("%s still held by %s", tc.device, h)
			}
			if obj, err := bn.client.Tracker().Get(claimsResource, c.Namespace, c.Name); err == nil && len(obj.(*resourceapi.ResourceClaim).Status.Devices) != 0 {
				t.Fatalf("status written for a claim that left: %+v", obj.(*resourceapi.ResourceClaim).Status.Devices)
			}
		})
	}
}

// TestBinderReleasesClaimDeletedBeforeItsProgrammingStarted: a claim
// deleted after the Binder picked it up but before its programming
// started is released once that programming has run: its region is not
// held for a claim that no longer exists.
func TestBinderReleasesClaimDeletedBeforeItsProgrammingStarted(t *testing.T) {
	// The first programming (the deleted claim's) waits at its first look
	// at the devices until a second claim's programming looks: the Binder
	// works through its queue in order, so by then it has handled the
	// deletion, which comes after the first look.
	var calls atomic.Int32
	first, second := make(chan struct{}), make(chan struct{})
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2}, devices: func(devices func() *discovery.Result) func() *discovery.Result {
		return func() *discovery.Result {
			switch calls.Add(1) {
			case 1:
				close(first)
				<-second
			case 2:
				close(second)
			}
			return devices()
		}
	}})
	gone := bn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	<-first
	if err := bn.client.ResourceV1().ResourceClaims(gone.Namespace).Delete(context.Background(), gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	barrier := bn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: simnode.SecondAFUID}))
	bn.waitClaim(t, barrier, settled(dev1))
	bn.released.wait(t, gone.UID)
	if h, held := bn.State.Holders()[dev0]; held {
		t.Fatalf("%s held by %s after its claim was deleted", dev0, h)
	}
}

// appliedStatus records every version of the claims' device status the
// API server stored.
type appliedStatus struct {
	mu   sync.Mutex
	seen map[string][]string // device -> condition types set True, in order
}

func watchStatus(t testing.TB, bn *bindingNode) *appliedStatus {
	t.Helper()
	a := &appliedStatus{seen: map[string][]string{}}
	w, err := bn.client.Tracker().Watch(claimsResource, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*resourceapi.ResourceClaim)
			if !ok {
				continue
			}
			a.mu.Lock()
			for _, d := range c.Status.Devices {
				for _, cond := range d.Conditions {
					if cond.Status == metav1.ConditionTrue {
						a.seen[d.Device] = append(a.seen[d.Device], cond.Type)
					}
				}
			}
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *appliedStatus) of(device string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen[device])
}

// TestBinderWritesOnlyTheCurrentAllocation: an outcome is written only for
// the allocation it was reached for. When the claim changed otherwise
// while its programming ran (a label, say), the outcome is written; when
// it was allocated again, that outcome is dropped and the new allocation
// is programmed and reported.
func TestBinderWritesOnlyTheCurrentAllocation(t *testing.T) {
	// Each value on gate lets one programming finish; closed, all do.
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 3}, node: testnode.Options{Programmer: sim}})
	applied := watchStatus(t, bn)
	const dev2 = "fpga-0000-03-00-0-p0"

	c := bn.claim(t, []string{dev2}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	<-started
	bn.change(t, c, false, func(c *resourceapi.ResourceClaim) { c.Labels["example.com/team"] = "a" })
	gate <- struct{}{}
	got := bn.waitClaim(t, c, settled(dev2))
	if cond := condition(got, dev2, conditionProgrammed); cond.Status != metav1.ConditionTrue || cond.Reason != "Programmed" {
		t.Fatalf("claim changed otherwise: condition %s %+v, want True, Programmed", conditionProgrammed, cond)
	}
	if calls := sim.TotalCalls(); calls != 1 {
		t.Fatalf("programmed %d times, want once", calls)
	}

	c = bn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	<-started
	// The scheduler gave up on this allocation and allocated the claim
	// again, a second later at least, another device.
	cfg := fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU})
	bn.change(t, c, true, func(c *resourceapi.ResourceClaim) {
		c.Status.Allocation = allocation(c.Status.Allocation.AllocationTimestamp.Add(time.Second), []string{dev1}, cfg)
		c.Status.Devices = nil
	})
	close(gate)
	got = bn.waitClaim(t, c, settled(dev1))
	if cond := condition(got, dev1, conditionProgrammed); cond.Status != metav1.ConditionTrue {
		t.Fatalf("claim allocated again: %+v, want %s True", cond, conditionProgrammed)
	}
	if seen := applied.of(dev0); len(seen) != 0 {
		t.Fatalf("the outcome for the earlier allocation (%s) was written: %v", dev0, seen)
	}
	if holds := bn.State.Holders(); holds[dev1] != c.UID || holds[dev0] != "" {
		t.Fatalf("holds %v, want %s for %s and %s free", holds, dev1, c.UID, dev0)
	}
}

// TestBinderRacesKubeletAndDeallocation races, many times, the Binder's
// programming of a claim with the kubelet's prepare of that claim and
// with the claim's deallocation and the allocation of its device to
// another claim. After every round: no region was programmed for a claim
// that did not hold it, never twice at once, a kubelet prepare that
// succeeded handed out the device, and once the claims are gone nothing
// is held.
func TestBinderRacesKubeletAndDeallocation(t *testing.T) {
	var violations atomic.Int64
	var lastBad atomic.Value
	var bn *bindingNode
	// Programming takes a few milliseconds, so that the kubelet's call
	// and the scheduler's changes often arrive while it runs.
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Delay: 2 * time.Millisecond, OnStart: func(*discovery.Card, *discovery.Port) {
		select {
		case started <- struct{}{}:
		default:
		}
	}}
	bn = startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 1}, node: testnode.Options{MemoryDisk: true, Programmer: sim,
		OnStep: func(step state.Step, h types.UID) {
			if step != state.StepProgrammed {
				return
			}
			if got := bn.State.Holders()[dev0]; got != h {
				violations.Add(1)
				lastBad.Store(fmt.Sprintf("programmed for %s while %q holds the region", h, got))
			}
		},
	}})
	dra := bn.draClient(t)
	ctx := context.Background()
	rounds := 15
	if testing.Short() {
		rounds = 5
	}
	afus := []string{NewAFU, simnode.SecondAFUID}
	for i := range rounds {
		select {
		case <-started:
		default:
		}
		a := bn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: afus[i%2]}))
		next := fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: afus[(i+1)%2]})
		var b *resourceapi.ResourceClaim
		var kubelet *drapbv1.NodePrepareResourcesResponse
		var kubeletErr, schedulerErr error
		var wg sync.WaitGroup
		called := make(chan struct{})
		wg.Go(func() {
			defer close(called)
			kubelet, kubeletErr = dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(a)}})
		})
		wg.Go(func() {
			if i%2 == 1 {
				// Every other round, a's programming has started.
				select {
				case <-started:
				case <-called:
				}
			}
			// The scheduler gives up on a's allocation and allocates the
			// region to another claim.
			if schedulerErr = bn.update(a, true, clearAllocation); schedulerErr == nil {
				b, schedulerErr = bn.createClaim([]string{dev0}, next)
			}
		})
		wg.Wait()
		if schedulerErr != nil {
			t.Fatalf("round %d: %v", i, schedulerErr)
		}
		checkRacedPrepare(t, i, a, kubelet, kubeletErr)
		// The kubelet unprepares what it prepared; the claims go.
		unprepareAndDelete(t, bn, dra, i, a, b)
		waitNothingHeld(t, bn.State, i)
	}
	if n := violations.Load(); n != 0 {
		t.Fatalf("%d programmings for a claim that did not hold the region; last: %v", n, lastBad.Load())
	}
	if o := bn.Programmer.Overlaps(); o != 0 {
		t.Fatalf("the region was programmed twice at once %d times", o)
	}
}

// checkRacedPrepare checks the kubelet's prepare of claim a in round i,
// raced with a's deallocation: it failed because the claim was
// deallocated, or it succeeded and handed out the device.
func checkRacedPrepare(t *testing.T, i int, a *resourceapi.ResourceClaim, kubelet *drapbv1.NodePrepareResourcesResponse, kubeletErr error) {
	t.Helper()
	switch {
	case kubeletErr != nil:
		// The kubelet plugin helper read the claim deallocated.
		if !strings.Contains(kubeletErr.Error(), "not allocated") {
			t.Fatalf("round %d: the kubelet's prepare: %v", i, kubeletErr)
		}
	case kubelet.Claims[string(a.UID)] == nil:
		t.Fatalf("round %d: the kubelet's prepare has no result for %s", i, a.Name)
	case kubelet.Claims[string(a.UID)].Error == "":
		if r := kubelet.Claims[string(a.UID)]; len(r.Devices) != 1 || len(r.Devices[0].CdiDeviceIds) == 0 {
			t.Fatalf("round %d: the kubelet's prepare succeeded without handing out the device: %+v", i, r)
		}
	}
}

// unprepareAndDelete unprepares each claim through the kubelet's DRA
// client, retrying while its region is still being released, then deletes
// it.
func unprepareAndDelete(t *testing.T, bn *bindingNode, dra drapbv1.DRAPluginClient, i int, claims ...*resourceapi.ResourceClaim) {
	t.Helper()
	ctx := context.Background()
	for _, c := range claims {
		for {
			resp, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(c)}})
			if err != nil {
				t.Fatal(err)
			}
			if r := resp.Claims[string(c.UID)]; r.Error == "" {
				break
			} else if !strings.Contains(r.Error, "still releasing") && !strings.Contains(r.Error, "being released") {
				t.Fatalf("round %d: unprepare %s: %s", i, c.Name, r.Error)
			}
		}
		if err := bn.client.ResourceV1().ResourceClaims(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
}

// waitNothingHeld waits until the node holds no region and records no
// claim. Releasing the claims of a deleted claim is background work that
// reports nothing when there was nothing left to release, so this polls
// the state (bounded).
func waitNothingHeld(t testing.TB, st *state.State, round int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return len(st.Holders()) == 0, nil
	})
	if err != nil {
		t.Fatalf("round %d: regions still held after the claims were unprepared and deleted: %v", round, st.Holders())
	}
}

// sliceWrite is what the driver asked the API server to store for a
// ResourceSlice.
type sliceWrite struct {
	bindingConditions bool
	afu               string // of dev0
}

// sliceWrites records the driver's ResourceSlice writes.
type sliceWrites struct {
	mu      sync.Mutex
	writes  []sliceWrite
	changed chan struct{}
}

func (s *sliceWrites) add(w sliceWrite) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, w)
	close(s.changed)
	s.changed = make(chan struct{})
}

// wait waits for a write that satisfies ok and returns it.
func (s *sliceWrites) wait(t testing.TB, what string, ok func(sliceWrite) bool) sliceWrite {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for seen := 0; ; {
		s.mu.Lock()
		writes, changed := s.writes, s.changed
		s.mu.Unlock()
		for ; seen < len(writes); seen++ {
			if ok(writes[seen]) {
				return writes[seen]
			}
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no slice write %s; writes: %+v", what, writes)
		}
	}
}

// TestBindingConditionsDroppedByAPIServer: where the API server drops
// binding conditions (feature DRADeviceBindingConditions off), the driver
// stops its Binder, publishes its devices without binding conditions from
// then on, and claims are programmed at the kubelet's prepare.
func TestBindingConditionsDroppedByAPIServer(t *testing.T) {
	writes := &sliceWrites{changed: make(chan struct{})}
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2}, api: func(c *fake.Clientset, api *apiServer) {
		c.PrependReactor("*", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
			a, ok := action.(interface{ GetObject() runtime.Object })
			if !ok || (action.GetVerb() != "create" && action.GetVerb() != "update") {
				return false, nil, nil
			}
			// Until the Binder watches, the API server is not ready for
			// slices: the Binder's stop is then what the test waits for.
			if !api.selectedWatched() {
				return true, nil, apierrors.NewServiceUnavailable("injected: not ready")
			}
			slice := a.GetObject().(*resourceapi.ResourceSlice)
			var w sliceWrite
			for i := range slice.Spec.Devices {
				d := &slice.Spec.Devices[i]
				w.bindingConditions = w.bindingConditions || len(d.BindingConditions) > 0 || len(d.BindingFailureConditions) > 0
				d.BindingConditions, d.BindingFailureConditions, d.BindsToNode = nil, nil, nil
				if v := d.Attributes[driverName+"/"+deviceslice.AttrAFUID].StringValue; d.Name == dev0 && v != nil {
					w.afu = *v
				}
			}
			writes.add(w)
			return false, nil, nil
		})
	}})
	writes.wait(t, "with binding conditions", func(w sliceWrite) bool { return w.bindingConditions })
	bn.api.waitSelectedWatches(t, "the Binder stops", func(_, running int) bool { return running == 0 })
	if bn.driver.BindingConditions() {
		t.Fatal("the driver still programs before binding after the API server dropped binding conditions")
	}
	// The next publish asks for no binding conditions.
	const afu = "00112233445566778899aabbccddeeff"
	if err := bn.sim.SetAFUID(bn.sim.Cards[0].Ports[0], afu); err != nil {
		t.Fatal(err)
	}
	bn.driver.RefreshDevices()
	if w := writes.wait(t, "with the new AFU", func(w sliceWrite) bool { return w.afu == afu }); w.bindingConditions {
		t.Fatalf("the driver published binding conditions after the API server dropped them: %+v", w)
	}
	// Claims are programmed at the kubelet's prepare.
	pn := &preparingNode{testNode: bn.testNode}
	pn.uid.Store(1000)
	c := pn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	if r := pn.prepare(t, bn.draClient(t), c); r.Error != "" || len(r.Devices) != 1 {
		t.Fatalf("kubelet's prepare: %+v", r)
	}
	if calls := bn.Programmer.TotalCalls(); calls != 1 {
		t.Fatalf("programmed %d times at the kubelet's prepare, want once", calls)
	}
}

// checkClaimSelectors checks that the node daemon listed and watched
// claims, only with the label selector of its node, so that the API
// server sends it only the claims routed to it. The test's own reads go
// to the fake's tracker and are not recorded.
func checkClaimSelectors(t testing.TB, bn *bindingNode) {
	t.Helper()
	want := claimroute.Selector(driverName, nodeName).String()
	var lists, watches int
	for _, a := range bn.client.Actions() {
		if a.GetResource() != claimsResource {
			continue
		}
		var sel fmt.Stringer
		switch a := a.(type) {
		case k8stesting.ListAction:
			sel = a.GetListRestrictions().Labels
			lists++
		case k8stesting.WatchAction:
			sel = a.GetWatchRestrictions().Labels
			watches++
		default:
			continue
		}
		if sel == nil || sel.String() != want {
			t.Errorf("%s of resourceclaims with label selector %q, want %q", a.GetVerb(), sel, want)
		}
	}
	if lists == 0 || watches == 0 {
		t.Fatalf("%d lists and %d watches of resourceclaims recorded, want the Binder's", lists, watches)
	}
}

// TestProgrammedHoldOfClaimGoneWhileDown: a claim whose regions an
// earlier daemon programmed before binding, and which was deleted while
// no daemon ran, is released when the Binder starts: no informer event
// names it any more, and no kubelet will unprepare it.
func TestProgrammedHoldOfClaimGoneWhileDown(t *testing.T) {
	gone := state.Holder{UID: "uid-deleted-while-down", Namespace: "default", Name: "deleted-while-down"}
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2}, beforeBinder: func(n *testNode) {
		req := []state.DeviceRequest{{Device: dev0, Requests: []string{"fpga-0"}, Config: &v1alpha1.FpgaConfig{AFUID: NewAFU}}}
		if _, err := n.State.Prepare(context.Background(), gone, req, n.driver.Devices(), state.BeforeBinding()); err != nil {
			t.Fatal(err)
		}
		if rec, _ := n.State.Claim(gone.UID); rec.Phase != state.PhaseProgrammed {
			t.Fatalf("%s is %q before the Binder starts, want %s", gone.UID, rec.Phase, state.PhaseProgrammed)
		}
	}})
	bn.released.wait(t, gone.UID)
	if h, held := bn.State.Holders()[dev0]; held {
		t.Errorf("%s is held by %s after the Binder started, want it free", dev0, h)
	}
}

// TestStartedHoldOfClaimGoneWhileDown: a claim whose programming before
// binding failed (or was cut short by the daemon's end) keeps its record
// at PhaseStarted, holding its region; deleted while no daemon ran, it is
// released when the Binder starts, as one programmed is: no informer
// event names it any more and no kubelet will unprepare it (the kubelet
// never prepared it). A started record of a claim that still exists and
// is not the Binder's (a kubelet's failed prepare) stays.
func TestStartedHoldOfClaimGoneWhileDown(t *testing.T) {
	gone := state.Holder{UID: "uid-failed-then-deleted-while-down", Namespace: "default", Name: "failed-then-deleted"}
	kubelets := state.Holder{UID: "uid-kubelet-prepare-failed", Namespace: "default", Name: "kubelet-prepare-failed"}
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2},
		api: func(c *fake.Clientset, _ *apiServer) {
			// The kubelet's claim exists, allocated without binding
			// conditions: no label routes it to the Binder.
			if err := c.Tracker().Add(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: kubelets.Namespace, Name: kubelets.Name, UID: kubelets.UID}}); err != nil {
				t.Fatal(err)
			}
		},
		beforeBinder: func(n *testNode) {
			for _, tc := range []struct {
				h    state.Holder
				dev  string
				opts []state.PrepareOption
			}{{gone, dev0, []state.PrepareOption{state.BeforeBinding()}}, {kubelets, dev1, nil}} {
				n.Programmer.FailNext(fmt.Errorf("injected PR error"))
				req := []state.DeviceRequest{{Device: tc.dev, Requests: []string{"fpga-0"}, Config: &v1alpha1.FpgaConfig{AFUID: NewAFU}}}
				if _, err := n.State.Prepare(context.Background(), tc.h, req, n.driver.Devices(), tc.opts...); err == nil {
					t.Fatal("programming did not fail")
				}
				if rec, _ := n.State.Claim(tc.h.UID); rec.Phase != state.PhaseStarted {
					t.Fatalf("%s is %q before the Binder starts, want %s", tc.h.UID, rec.Phase, state.PhaseStarted)
				}
			}
		}})
	bn.released.wait(t, gone.UID)
	if h, held := bn.State.Holders()[dev0]; held {
		t.Errorf("%s is held by %s after the Binder started, want it free", dev0, h)
	}
	if h := bn.State.Holders()[dev1]; h != kubelets.UID {
		t.Errorf("%s is held by %q, want the kubelet's claim %s still", dev1, h, kubelets.UID)
	}
}

// waitAFU waits until the driver's devices show afu loaded on the
// simulated node's first port.
func waitAFU(t testing.TB, n *testNode, afu string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		changed := n.driver.DevicesChanged()
		if _, p, ok := n.driver.Devices().FindPort(dev0); ok && p.AFUID == afu {
			return
		}
		n.driver.RefreshDevices()
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the driver never read AFU %s on %s", afu, dev0)
		}
	}
}

// TestKubeletProgrammingAfterBindingReported: a region found carrying the
// function before binding ("AlreadyLoaded": no bitstream in the status)
// that lost it before the kubelet's prepare is programmed by that prepare;
// the claim's status then says what was loaded, from which file and when,
// not that the region carried the function already.
func TestKubeletProgrammingAfterBindingReported(t *testing.T) {
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2}})
	if err := bn.sim.SetAFUID(bn.sim.Cards[0].Ports[0], NewAFU); err != nil {
		t.Fatal(err)
	}
	waitAFU(t, bn.testNode, NewAFU)
	c := bn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	got := bn.waitClaim(t, c, settled(dev0))
	if cond := condition(got, dev0, conditionProgrammed); cond.Status != metav1.ConditionTrue || cond.Reason != "AlreadyLoaded" {
		t.Fatalf("condition %s: %+v, want True, AlreadyLoaded", conditionProgrammed, cond)
	}
	if data := deviceData(t, got, dev0); data.Bitstream != "" || data.ProgrammedAt != nil {
		t.Fatalf("device data before binding %+v, want no bitstream (the region carried the function)", data)
	}
	if calls := bn.Programmer.TotalCalls(); calls != 0 {
		t.Fatalf("programmed %d times before binding, want none", calls)
	}

	// The region loses the function (reset outside the driver) before
	// the pod's kubelet prepares the claim: that prepare programs it.
	if err := bn.sim.SetAFUID(bn.sim.Cards[0].Ports[0], simnode.SecondAFUID); err != nil {
		t.Fatal(err)
	}
	waitAFU(t, bn.testNode, simnode.SecondAFUID)
	pn := &preparingNode{testNode: bn.testNode}
	if r := pn.prepare(t, bn.draClient(t), c); r.Error != "" || len(r.Devices) != 1 {
		t.Fatalf("kubelet's prepare: %+v", r)
	}
	if calls := bn.Programmer.TotalCalls(); calls != 1 {
		t.Fatalf("the kubelet's prepare programmed %d times, want once", calls)
	}
	// The status is written once the kubelet has its answer.
	got = bn.waitClaim(t, c, func(c *resourceapi.ResourceClaim) bool { return readyIn(c, dev0) })
	bitstream := filepath.Join(bn.RepoDir, "accel.gbs")
	data := deviceData(t, got, dev0)
	if data.AFUID != NewAFU || data.Bitstream != bitstream || data.SHA256 != fileSHA256(t, bitstream) || data.ProgrammedAt == nil {
		t.Fatalf("device data after the kubelet's prepare programmed %s: %+v, want AFU %s from %s, with its sha256 and when", dev0, data, NewAFU, bitstream)
	}
}

// TestStartedHoldLookupRetried: the Binder's start looks a claim recorded
// as started up in the API server; a lookup that fails for a moment (the
// API server is briefly unavailable) is tried again, and the claim, gone,
// is released: a transient error must not keep its region held for as long
// as the daemon runs.
func TestStartedHoldLookupRetried(t *testing.T) {
	gone := state.Holder{UID: "uid-failed-then-deleted-lookup-fails", Namespace: "default", Name: "failed-then-deleted"}
	var failed atomic.Bool
	bn := startBindingNode(t, bindingOptions{sim: simnode.Options{Cards: 2},
		api: func(c *fake.Clientset, _ *apiServer) {
			c.PrependReactor("get", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.(k8stesting.GetAction).GetName() != gone.Name || failed.Swap(true) {
					return false, nil, nil
				}
				return true, nil, apierrors.NewServiceUnavailable("etcd leader election in progress")
			})
		},
		beforeBinder: func(n *testNode) {
			n.Programmer.FailNext(fmt.Errorf("injected PR error"))
			req := []state.DeviceRequest{{Device: dev0, Requests: []string{"fpga-0"}, Config: &v1alpha1.FpgaConfig{AFUID: NewAFU}}}
			if _, err := n.State.Prepare(context.Background(), gone, req, n.driver.Devices(), state.BeforeBinding()); err == nil {
				t.Fatal("programming did not fail")
			}
		}})
	bn.released.wait(t, gone.UID)
	if !failed.Load() {
		t.Fatal("the Binder never looked the started claim up")
	}
	if h, held := bn.State.Holders()[dev0]; held {
		t.Errorf("%s is held by %s after the Binder started, want it free", dev0, h)
	}
}
