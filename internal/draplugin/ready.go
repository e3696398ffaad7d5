package draplugin

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// readyWriteTimeout bounds one report's status write (its retries on
// conflict included).
const readyWriteTimeout = time.Minute

// readyReport is a prepare whose devices are to be reported Ready in
// its claim's status.
type readyReport struct {
	// ctx carries the prepare's logger, not its cancellation.
	ctx   context.Context
	claim *resourceapi.ResourceClaim
	out   state.Outcome
	devs  *discovery.Result
}

// readyWrites runs the status writes of prepared claims outside the
// kubelet's call: at most one write per claim at a time, and a report
// that arrives while its claim's write runs replaces any report of that
// claim still waiting. The zero value is ready to use.
type readyWrites struct {
	mu sync.Mutex
	// waiting has an entry for every claim whose writer runs: the newest
	// report not yet taken, or nil.
	waiting map[types.UID]*readyReport
}

// add queues r and starts its claim's writer, which calls write for each
// report it takes, unless that writer runs already.
func (q *readyWrites) add(r *readyReport, write func(*readyReport)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting == nil {
		q.waiting = map[types.UID]*readyReport{}
	}
	uid := r.claim.UID
	_, running := q.waiting[uid]
	q.waiting[uid] = r
	if !running {
		go q.drain(uid, write)
	}
}

// drain writes uid's waiting reports until none is left.
func (q *readyWrites) drain(uid types.UID, write func(*readyReport)) {
	for {
		q.mu.Lock()
		r := q.waiting[uid]
		if r == nil {
			delete(q.waiting, uid)
			q.mu.Unlock()
			return
		}
		q.waiting[uid] = nil
		q.mu.Unlock()
		write(r)
	}
}

// reportReady has the prepared devices of out reported in the claim's
// status (writeReady) after the prepare returned: the kubelet does not
// wait for the API server's write. out's record is on disk already.
func (c *Claims) reportReady(ctx context.Context, claim *resourceapi.ResourceClaim, out state.Outcome, devs *discovery.Result) {
	if c.Client == nil {
		return
	}
	c.ready.add(&readyReport{ctx: context.WithoutCancel(ctx), claim: claim, out: out, devs: devs}, c.writeReady)
}

// writeReady reports a prepare's devices in its claim's status: Ready,
// and what the driver knows about each (DeviceData). Nothing is written
// for a claim that is gone: unprepared on this node meanwhile, deleted,
// or allocated anew. A failure is logged: the devices are prepared either
// way.
func (c *Claims) writeReady(r *readyReport) {
	ctx, cancel := context.WithTimeout(r.ctx, readyWriteTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	rec, ok := c.State.Claim(r.claim.UID)
	if !ok {
		logger.V(4).Info("Not reporting the prepared devices: the claim was unprepared meanwhile")
		return
	}
	_, err := writeDeviceStatus(ctx, c.Client, r.claim, c.DriverName, c.readyEntries(r, rec))
	switch {
	case err == nil:
	case errors.Is(err, errAllocationChanged), apierrors.IsNotFound(err):
		logger.V(4).Info("Not reporting the prepared devices: the claim is gone", "err", err)
	default:
		logger.Error(err, "Reporting the prepared devices in the claim's status failed")
	}
}

// readyEntries are the status entries of a prepare's devices.
func (c *Claims) readyEntries(r *readyReport, rec state.ClaimRecord) []deviceStatus {
	bound := bindingResults(r.claim, c.DriverName, c.PoolName)
	var entries []deviceStatus
	for _, d := range r.out.Devices {
		e := deviceStatus{
			pool: c.PoolName, device: d.Device,
			conditions: []metav1.Condition{condition(ConditionReady, metav1.ConditionTrue, "Prepared", "the device is prepared for the claim's containers")},
		}
		// A device programmed before binding has the binding worker's
		// data, with how long programming took and when; it stays,
		// unless this prepare programmed the region again (it lost what
		// was loaded before binding): then that data is no longer true.
		reprogrammed := slices.ContainsFunc(r.out.Programmed, func(p state.Programming) bool { return p.Device == d.Device && p.Err == nil })
		if reprogrammed || !slices.ContainsFunc(bound, func(b resourceapi.DeviceRequestAllocationResult) bool { return b.Device == d.Device }) {
			e.data = deviceData(c.State, rec, d.Device, r.devs)
		}
		entries = append(entries, e)
	}
	return entries
}
