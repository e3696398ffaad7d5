package draplugin

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
)

// TestReadyWritesCoalesce: a claim has one status write at a time; the
// reports that arrive meanwhile are not queued one by one: the newest
// replaces the one waiting, and the next write is of that one.
func TestReadyWritesCoalesce(t *testing.T) {
	type call struct {
		r       *readyReport
		release chan struct{}
	}
	calls := make(chan call)
	write := func(r *readyReport) {
		c := call{r, make(chan struct{})}
		calls <- c
		<-c.release
	}
	next := func() call {
		t.Helper()
		select {
		case c := <-calls:
			return c
		case <-time.After(20 * time.Second):
			t.Fatal("no status write")
			return call{}
		}
	}
	report := func(uid types.UID) *readyReport {
		return &readyReport{claim: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: uid}}}
	}
	var q readyWrites
	r1, r2, r3, r4 := report("a"), report("a"), report("a"), report("a")
	other := report("b")
	q.add(r1, write)
	first := next()
	if first.r != r1 {
		t.Fatal("the first write is not of the first report")
	}
	// r1's write runs: r2 waits, r3 replaces it; another claim's report
	// is written meanwhile.
	q.add(r2, write)
	q.add(r3, write)
	q.add(other, write)
	if c := next(); c.r != other {
		t.Fatal("a second write of a claim whose write runs started")
	} else {
		close(c.release)
	}
	close(first.release)
	second := next()
	if second.r != r3 {
		t.Fatalf("after the first write: a write of report %p, want the newest (%p); the one it replaced is %p", second.r, r3, r2)
	}
	q.add(r4, write)
	close(second.release)
	third := next()
	if third.r != r4 {
		t.Fatal("a report that came during the second write was not written after it")
	}
	close(third.release)
}

// TestWriteReadyDropsGoneClaims: a prepare's devices are written Ready
// with their data; nothing is written for a claim unprepared meanwhile,
// and a claim deleted meanwhile is not written again or reported as a
// failure.
func TestWriteReadyDropsGoneClaims(t *testing.T) {
	for _, tc := range []struct {
		name string
		// gone makes the claim go away before the write.
		gone func(ctx context.Context, c *Claims, client *fake.Clientset, claim *resourceapi.ResourceClaim) error
		// updates: status updates sent.
		updates int
		ready   bool
	}{
		{name: "prepared", updates: 1, ready: true},
		{name: "unprepared", updates: 0, gone: func(ctx context.Context, c *Claims, _ *fake.Clientset, claim *resourceapi.ResourceClaim) error {
			return c.State.Unprepare(ctx, claim.UID)
		}},
		{name: "deleted", updates: 1, gone: func(ctx context.Context, _ *Claims, client *fake.Clientset, claim *resourceapi.ResourceClaim) error {
			return client.Tracker().Delete(claimsGVR, claim.Namespace, claim.Name)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(context.Background(), logger)
			n := testnode.New(t, testnode.Options{})
			devs, err := n.Scanner.Scan()
			if err != nil {
				t.Fatal(err)
			}
			const device = "fpga-0000-01-00-0-p0"
			claim := statusClaim(device)
			client := fake.NewClientset(claim)
			c := &Claims{DriverName: statusDriver, PoolName: "node", State: n.State, Client: client}
			reqs, err := c.requests(claim)
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.State.Prepare(ctx, state.Holder{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}, reqs, devs)
			if err != nil {
				t.Fatal(err)
			}
			if tc.gone != nil {
				if err := tc.gone(ctx, c, client, claim); err != nil {
					t.Fatal(err)
				}
			}
			client.ClearActions()
			c.writeReady(&readyReport{ctx: ctx, claim: claim, out: out, devs: devs})

			var updates, reads int
			for _, a := range client.Actions() {
				switch {
				case a.GetVerb() == "update" && a.GetSubresource() == "status":
					updates++
				case a.GetVerb() == "get":
					reads++
				}
			}
			if updates != tc.updates || reads != 0 {
				t.Errorf("%d status updates and %d reads, want %d updates and no read", updates, reads, tc.updates)
			}
			for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
				if e.Type == ktesting.LogError {
					t.Errorf("logged an error: %s %v", e.Message, e.Err)
				}
			}
			if !tc.ready {
				return
			}
			got, err := client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var mine *resourceapi.AllocatedDeviceStatus
			for i, d := range got.Status.Devices {
				if d.Driver == statusDriver && d.Device == device {
					mine = &got.Status.Devices[i]
				}
			}
			var data DeviceData
			if mine == nil || !apimeta.IsStatusConditionTrue(mine.Conditions, ConditionReady) || mine.Data == nil || json.Unmarshal(mine.Data.Raw, &data) != nil || len(data.DeviceNodes) == 0 {
				t.Fatalf("status of the prepared device: %+v, want Ready with its data", mine)
			}
		})
	}
}
