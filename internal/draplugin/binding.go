package draplugin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/claimroute"
	"github.com/fpga-dra/fpga-dra-driver/internal/reconcile"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Binder does a node's work for claims allocated with binding conditions
// (KEP-5007), before their pods are bound: it programs the regions the
// claims' configs ask for (or finds the function loaded) and reports the
// outcome in each device's status, where the scheduler waits for it: the
// binding condition True, or the failure condition True with the reason,
// after which the scheduler allocates the claim again, elsewhere. A device
// whose programming failed is quarantined for a while, so that the next
// allocation picks another one. A claim deallocated (or deleted) before
// its pod was bound releases its regions, waiting for programming that
// cannot be stopped.
//
// It watches only the claims the controller routed to this node
// (claimroute), so its cost does not grow with other nodes' claims.
type Binder struct {
	DriverName string
	NodeName   string
	Client     kubernetes.Interface
	// Claims decodes configs and prepares on the node's State.
	Claims *Claims
	// Devices returns the node's latest discovery result.
	Devices func() *discovery.Result
	// Quarantine keeps a device out of new allocations for a while after
	// its programming failed (nil: none).
	Quarantine func(device, reason string)

	lister resourcelisters.ResourceClaimLister
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]

	mu sync.Mutex
	// seen maps claims to the UID last seen, to release a deleted one.
	seen map[cache.ObjectName]types.UID
	// running are the claims being programmed.
	running map[types.UID]bool
	// superseded maps claims to the version the outcome was written over:
	// the informer may still have that version for a moment, and it is
	// no reason to program again.
	superseded map[types.UID]string
}

// Run watches the node's claims and works on them until ctx ends.
func (b *Binder) Run(ctx context.Context) error {
	logger := klog.LoggerWithName(klog.FromContext(ctx), "binding")
	ctx = klog.NewContext(ctx, logger)
	b.seen = map[cache.ObjectName]types.UID{}
	b.running = map[types.UID]bool{}
	b.superseded = map[types.UID]string{}
	b.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "binding"})
	defer b.queue.ShutDown()
	selector := claimroute.Selector(b.DriverName, b.NodeName).String()
	// The typed informer, not a SharedInformerFactory: the factory links
	// every API group's informers and listers into the binary.
	inf := resourceinformers.NewFilteredResourceClaimInformer(b.Client, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	b.lister = resourcelisters.NewResourceClaimLister(inf.GetIndexer())
	enqueue := func(obj any) {
		if name, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			b.queue.Add(name)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	var informing sync.WaitGroup
	defer informing.Wait() // the informer ends with ctx
	informing.Go(func() { inf.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil // stopping
	}
	var started sync.WaitGroup
	defer started.Wait() // ends with ctx
	b.adoptRecorded(ctx, &started)
	logger.Info("Programming claims before binding", "selector", selector)
	// Several workers: a release waits for programming that cannot be
	// stopped, and must not hold up the node's other claims.
	reconcile.Run(ctx, b.queue, binderWorkers, b.sync, func(ctx context.Context, name cache.ObjectName, err error) {
		utilruntime.HandleErrorWithContext(ctx, err, "Claim before binding; retrying", "claim", name)
	})
	return nil
}

// adoptRecorded queues every claim the node holds as programmed before
// binding, as seen with the UID its record has: one deleted (or deleted
// and created again) while no daemon ran, which no informer event names
// any more and no kubelet will unprepare, is then released by sync like
// one deleted while the daemon runs. A claim recorded as started (its
// programming before binding failed, or the daemon ended while it ran)
// holds its regions as well; the record does not say whether the Binder
// or the kubelet started it, so it is adopted only when the claim is gone
// from the API server (a kubelet's claim that is gone is unprepared by
// nobody else either, and a release of it is no loss), and released by its
// UID, in the background (releaseStartedWhenGone), whatever other record
// has its name.
func (b *Binder) adoptRecorded(ctx context.Context, started *sync.WaitGroup) {
	for _, rec := range b.Claims.State.Records() {
		switch rec.Phase {
		case state.PhaseProgrammed:
		case state.PhaseStarted:
			started.Go(func() { b.releaseStartedWhenGone(ctx, rec) })
			continue
		default:
			continue
		}
		name := cache.ObjectName{Namespace: rec.Namespace, Name: rec.Name}
		b.mu.Lock()
		if _, known := b.seen[name]; !known {
			b.seen[name] = types.UID(rec.UID)
		}
		b.mu.Unlock()
		b.queue.Add(name)
	}
}

// startedGone reports whether the claim of rec, a record at PhaseStarted,
// is gone from the API server (deleted, or created again with another
// UID).
func (b *Binder) startedGone(ctx context.Context, rec state.ClaimRecord) (bool, error) {
	cur, err := b.Client.ResourceV1().ResourceClaims(rec.Namespace).Get(ctx, rec.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return cur.UID != types.UID(rec.UID), nil
}

// releaseStartedWhenGone looks rec's claim up, again with backoff until
// the API server answers, and releases rec's holder when its claim is
// gone: a lookup that fails for a moment must not keep the regions held
// while the daemon runs.
func (b *Binder) releaseStartedWhenGone(ctx context.Context, rec state.ClaimRecord) {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(rec.Namespace, rec.Name), "uid", rec.UID)
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 30 * time.Second}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		gone, err := b.startedGone(ctx, rec)
		if err != nil {
			logger.Error(err, "Looking up a claim recorded as started failed; retrying, its regions stay held meanwhile")
			return false, nil
		}
		if !gone {
			return true, nil
		}
		if err := b.release(ctx, types.UID(rec.UID)); err != nil {
			logger.Error(err, "Releasing a claim recorded as started, gone from the API server, failed; retrying")
			return false, nil
		}
		return true, nil
	})
}

// binderWorkers is how many claims a Binder works on at once; programming
// itself runs beside them.
const binderWorkers = 4

// sync looks at one claim: it releases what the node holds for a claim
// that no longer waits here, and starts programming one that does.
func (b *Binder) sync(ctx context.Context, name cache.ObjectName) error {
	claim, err := b.lister.ResourceClaims(name.Namespace).Get(name.Name)
	if apierrors.IsNotFound(err) {
		b.mu.Lock()
		uid := b.seen[name]
		b.mu.Unlock()
		if err := b.release(ctx, uid); err != nil {
			return err // retried: the UID is forgotten only once released
		}
		b.mu.Lock()
		if b.seen[name] == uid {
			delete(b.seen, name)
		}
		b.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	prev := b.seen[name]
	b.mu.Unlock()
	if prev != "" && prev != claim.UID {
		if err := b.release(ctx, prev); err != nil {
			return err
		}
	}
	b.mu.Lock()
	b.seen[name] = claim.UID
	b.mu.Unlock()
	node, pending := claimroute.Node(claim, b.DriverName)
	if !pending || node != b.NodeName {
		return b.release(ctx, claim.UID)
	}
	b.mu.Lock()
	rv, written := b.superseded[claim.UID]
	b.mu.Unlock()
	if (written && rv == claim.ResourceVersion) || b.settled(claim) {
		return nil
	}
	b.mu.Lock()
	running := b.running[claim.UID]
	b.running[claim.UID] = true
	b.mu.Unlock()
	if !running {
		go b.program(ctx, claim.DeepCopy())
	}
	return nil
}

// settled reports whether every device of the claim that waits for the
// binding condition has it, or its failure condition, in the status.
func (b *Binder) settled(claim *resourceapi.ResourceClaim) bool {
	for _, r := range b.waiting(claim) {
		i := slices.IndexFunc(claim.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool {
			return d.Driver == r.Driver && d.Pool == r.Pool && d.Device == r.Device
		})
		if i < 0 {
			return false
		}
		c := claim.Status.Devices[i].Conditions
		if !apimeta.IsStatusConditionTrue(c, qualified(b.DriverName, ConditionProgrammed)) && !apimeta.IsStatusConditionTrue(c, qualified(b.DriverName, ConditionProgrammingFailed)) {
			return false
		}
	}
	return true
}

// waitsHere reports whether the claim, with its UID, still waits for
// binding conditions on this node.
func (b *Binder) waitsHere(claim *resourceapi.ResourceClaim) bool {
	cur, err := b.lister.ResourceClaims(claim.Namespace).Get(claim.Name)
	if err != nil || cur.UID != claim.UID {
		return false
	}
	node, pending := claimroute.Node(cur, b.DriverName)
	return pending && node == b.NodeName
}

// waiting lists the claim's devices on this node that wait for binding
// conditions.
func (b *Binder) waiting(claim *resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	return bindingResults(claim, b.DriverName, b.NodeName)
}

// bindingResults lists the claim's devices of a driver's pool allocated
// with binding conditions.
func bindingResults(claim *resourceapi.ResourceClaim, driverName, pool string) []resourceapi.DeviceRequestAllocationResult {
	var out []resourceapi.DeviceRequestAllocationResult
	if claim.Status.Allocation == nil {
		return nil
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == driverName && r.Pool == pool && len(r.BindingConditions) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// release frees what the node holds for a claim that was programmed (or
// is being programmed) before binding and no longer waits here; a claim
// the kubelet prepared is the kubelet's to unprepare.
func (b *Binder) release(ctx context.Context, uid types.UID) error {
	if uid == "" {
		return nil
	}
	b.mu.Lock()
	delete(b.superseded, uid)
	b.mu.Unlock()
	v := b.Claims.State.Version(uid)
	rec, ok := b.Claims.State.Claim(uid)
	if ok && rec.Phase == state.PhaseCompleted {
		return nil
	}
	// A prepare since v (the kubelet's may complete it) fails this with
	// ErrChanged: sync then looks again.
	if err := b.Claims.State.Unprepare(ctx, uid, state.IfUnchanged(v)); err != nil {
		return fmt.Errorf("release claim %s, deallocated before its pod was bound: %w", uid, err)
	}
	if ok {
		klog.FromContext(ctx).Info("Released the regions of a claim deallocated before its pod was bound", "uid", uid, "claim", klog.KRef(rec.Namespace, rec.Name))
	}
	return nil
}

// program programs a claim's regions and reports the outcome.
func (b *Binder) program(ctx context.Context, claim *resourceapi.ResourceClaim) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "claim", klog.KObj(claim))
	ctx = klog.NewContext(ctx, logger)
	var werr error
	defer func() {
		b.mu.Lock()
		delete(b.running, claim.UID)
		b.mu.Unlock()
		// Look again: settled, or changed meanwhile; after a failed
		// status write, with backoff.
		if werr != nil {
			b.queue.AddRateLimited(cache.MetaObjectToName(claim))
		} else {
			b.queue.Add(cache.MetaObjectToName(claim))
		}
	}()
	out, err := b.prepare(ctx, claim)
	if errors.Is(err, state.ErrReleasing) || ctx.Err() != nil {
		return // the claim went away meanwhile; sync releases it
	}
	if !b.waitsHere(claim) {
		// The claim went away while it was being programmed, maybe
		// before this programming recorded its hold: sync may have
		// released it already.
		if err := b.release(ctx, claim.UID); err != nil {
			logger.Error(err, "Releasing a claim that went away while it was being programmed failed")
		}
		return
	}
	if err != nil {
		logger.Error(err, "Programming before binding failed")
		b.Claims.event(claim, v1.EventTypeWarning, "ProgrammingFailed", "Program", "Programming before binding failed: %v", err)
	}
	for _, p := range out.Programmed {
		if p.Err == nil {
			b.Claims.event(claim, v1.EventTypeNormal, "Programmed", "Program", "Loaded AFU %s into %s from %s in %s, before the pod was bound", p.AFUID, p.Device, p.Bitstream, p.Duration.Round(time.Millisecond))
		}
	}
	entries := b.outcome(claim, out, err)
	over, werr := writeDeviceStatus(ctx, b.Client, claim, b.DriverName, entries)
	switch {
	case errors.Is(werr, errAllocationChanged):
		werr = nil // a new allocation is worked on afresh
		return
	case werr != nil:
		logger.Error(werr, "Reporting the programming outcome failed; retrying with backoff (the scheduler gives up at its binding timeout)")
	default:
		b.mu.Lock()
		b.superseded[claim.UID] = over
		b.mu.Unlock()
	}
	if err != nil && b.Quarantine != nil {
		for _, r := range b.waiting(claim) {
			if i := slices.IndexFunc(out.Programmed, func(p state.Programming) bool { return p.Device == r.Device && deviceFault(p.Err) }); i >= 0 {
				b.Quarantine(r.Device, failureReason(out.Programmed[i].Err))
			}
		}
	}
}

// deviceFault reports a programming error that says something about the
// device (its partial reconfiguration failed, or what it loaded did not
// read back), not about the claim's config or bitstream. Only those
// quarantine a device: else one bad claim, allocated again and again,
// could take every region of a node out of service.
func deviceFault(err error) bool {
	return errors.Is(err, program.ErrProgramFailed) || errors.Is(err, program.ErrVerifyFailed)
}

// prepare programs the claim's devices before binding, as the kubelet's
// retries would: again while programming is still running.
func (b *Binder) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) (state.Outcome, error) {
	reqs, err := b.Claims.requests(claim)
	if err != nil {
		return state.Outcome{}, err
	}
	h := state.Holder{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
	var all state.Outcome
	for {
		out, err := b.Claims.State.Prepare(ctx, h, reqs, b.Devices(), state.BeforeBinding())
		all.Programmed = append(all.Programmed, out.Programmed...)
		if !errors.Is(err, state.ErrInProgress) || ctx.Err() != nil {
			return all, err
		}
	}
}

// outcome is the status entries reporting a programming outcome.
func (b *Binder) outcome(claim *resourceapi.ResourceClaim, out state.Outcome, err error) []deviceStatus {
	rec, _ := b.Claims.State.Claim(claim.UID)
	devs := b.Devices()
	var entries []deviceStatus
	for _, r := range b.waiting(claim) {
		e := deviceStatus{pool: r.Pool, device: r.Device}
		if err != nil {
			e.conditions = []metav1.Condition{
				condition(qualified(b.DriverName, ConditionProgrammingFailed), metav1.ConditionTrue, failureReason(err), err.Error()),
				condition(qualified(b.DriverName, ConditionProgrammed), metav1.ConditionFalse, failureReason(err), "see "+ConditionProgrammingFailed),
			}
			entries = append(entries, e)
			continue
		}
		reason, msg := "AlreadyLoaded", "the region carries the function already"
		e.data = deviceData(b.Claims.State, rec, r.Device, devs)
		for _, p := range out.Programmed {
			if p.Device == r.Device {
				reason, msg = "Programmed", fmt.Sprintf("loaded %s from %s in %s", p.AFUID, p.Bitstream, p.Duration.Round(time.Millisecond))
			}
		}
		e.conditions = []metav1.Condition{
			condition(qualified(b.DriverName, ConditionProgrammed), metav1.ConditionTrue, reason, msg),
			condition(qualified(b.DriverName, ConditionProgrammingFailed), metav1.ConditionFalse, reason, msg),
		}
		entries = append(entries, e)
	}
	return entries
}

// deviceData is what the status reports about a device of a record: with
// when and how long programming ran when this process programmed it for
// the record.
func deviceData(st *state.State, rec state.ClaimRecord, device string, devs *discovery.Result) *DeviceData {
	d := &DeviceData{}
	for _, r := range rec.Devices {
		if r.Device != device {
			continue
		}
		d.AFUID, d.Bitstream, d.SHA256 = r.AFUID, r.Bitstream, r.SHA256
		if at, took, ok := st.LastProgramming(device, r.AFUID); ok && r.Programmed {
			d.ProgrammingSeconds = took.Seconds()
			d.ProgrammedAt = &metav1.Time{Time: at}
		}
	}
	if card, port, ok := devs.FindPort(device); ok {
		d.InterfaceID = card.InterfaceID
		if d.AFUID == "" {
			d.AFUID = port.AFUID
		}
		for _, n := range port.Nodes() {
			d.DeviceNodes = append(d.DeviceNodes, n.Path)
		}
	}
	return d
}

// sameAllocation reports whether two versions of a claim have the same
// allocation: the same devices, stamped at the same time (the stamp has
// second granularity, so the devices tell apart two allocations within a
// second).
func sameAllocation(a, b *resourceapi.ResourceClaim) bool {
	if a.Status.Allocation == nil || b.Status.Allocation == nil {
		return false
	}
	ta, tb := a.Status.Allocation.AllocationTimestamp, b.Status.Allocation.AllocationTimestamp
	if (ta == nil) != (tb == nil) || (ta != nil && !ta.Equal(tb)) {
		return false
	}
	return slices.EqualFunc(a.Status.Allocation.Devices.Results, b.Status.Allocation.Devices.Results, func(x, y resourceapi.DeviceRequestAllocationResult) bool {
		return x.Request == y.Request && x.Driver == y.Driver && x.Pool == y.Pool && x.Device == y.Device
	})
}
