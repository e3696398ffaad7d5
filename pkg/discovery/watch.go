package discovery

import (
	"context"
	"errors"
	"os"
	"reflect"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Watcher keeps a discovery result current. A relevant kernel uevent (a
// card or port added or removed) triggers a full rescan, and so does a read
// that a pass gave up on as stuck once it returns, when the card was left
// out for it (see rescanOnReturn); every Interval only
// the ID, error and device-node attributes are re-read (Scanner.Refresh),
// never the whole tree. Each result that differs from the previous one is
// handed to OnChange, from one goroutine, in order.
type Watcher struct {
	Scanner *Scanner
	// Interval between cheap re-reads; 30 s when zero.
	Interval time.Duration
	// Events delivers hot-plug uevents. When nil the watcher cannot see
	// hot-plug and falls back to a full rescan every Interval.
	Events *UeventSource
	// Settle is how long to collect a burst of uevents (a card brings
	// several) before rescanning; 100 ms when zero.
	Settle   time.Duration
	OnChange func(ctx context.Context, res *Result)

	mu      sync.Mutex
	current *Result
	poke    chan bool // true: full rescan; false: refresh
	once    sync.Once
}

func (w *Watcher) init() {
	w.once.Do(func() { w.poke = make(chan bool, 1) })
}

// Current returns the latest result (nil before Run's first scan).
func (w *Watcher) Current() *Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Refresh asks the running watcher for an immediate cheap re-read, e.g.
// after a port was reprogrammed. It does not wait.
func (w *Watcher) Refresh() { w.trigger(false) }

// Rescan asks the running watcher for an immediate full rescan.
func (w *Watcher) Rescan() { w.trigger(true) }

func (w *Watcher) trigger(full bool) {
	w.init()
	for {
		select {
		case w.poke <- full:
			return
		default:
		}
		// A pending request is there: upgrade it to a full rescan if needed.
		select {
		case prev := <-w.poke:
			full = full || prev
		default:
		}
	}
}

// Run scans once, reports the result, and keeps watching until ctx ends.
// It returns an error only when the first scan fails.
func (w *Watcher) Run(ctx context.Context) error {
	w.init()
	logger := klog.FromContext(ctx)
	interval := w.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	settle := w.Settle
	if settle <= 0 {
		settle = 100 * time.Millisecond
	}
	res, err := w.Scanner.ScanContext(ctx)
	if err != nil {
		return err
	}
	w.publish(ctx, res)

	hotplug := make(chan struct{}, 1)
	if w.Events != nil {
		go w.readEvents(ctx, hotplug)
		go func() {
			<-ctx.Done()
			_ = w.Events.Close()
		}()
	} else {
		logger.Info("No uevent source: hot-plug is seen through a full rescan every interval", "interval", interval)
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var settleC <-chan time.Time
	var lastReturnScan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hotplug:
			if settleC == nil {
				settleC = time.After(settle)
			}
		case <-settleC:
			settleC = nil
			w.scan(ctx)
		case <-w.Scanner.Returned():
			if now := time.Now(); rescanOnReturn(w.Current(), lastReturnScan, now, interval) {
				lastReturnScan = now
				w.scan(ctx)
			}
		case full := <-w.poke:
			if full {
				w.scan(ctx)
			} else {
				w.refresh(ctx)
			}
		case <-ticker.C:
			if w.Events == nil || w.Current().leftOutStuck() {
				w.scan(ctx)
			} else {
				w.refresh(ctx)
			}
		}
	}
}

// rescanOnReturn decides whether a stuck read that returned makes the
// watcher rescan at once: only when the current result left a card out
// for a stuck read (a refresh never looks for cards), and at most once an
// interval, so that a card whose every read outlasts the timeout is not
// rescanned back to back. Otherwise the periodic pass reads it again
// (ticks rescan while a card is left out).
func rescanOnReturn(cur *Result, last, now time.Time, interval time.Duration) bool {
	return cur.leftOutStuck() && now.Sub(last) >= interval
}

func (w *Watcher) readEvents(ctx context.Context, hotplug chan<- struct{}) {
	logger := klog.FromContext(ctx)
	for {
		ev, err := w.Events.Read()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return
			}
			logger.V(5).Info("Ignoring uevent", "err", err)
			continue
		}
		if !ev.Relevant() {
			continue
		}
		logger.V(4).Info("FPGA uevent", "action", ev.Action, "devpath", ev.DevPath, "subsystem", ev.Subsystem)
		select {
		case hotplug <- struct{}{}:
		default:
		}
	}
}

func (w *Watcher) scan(ctx context.Context) {
	res, err := w.Scanner.ScanContext(ctx)
	if err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Rescan failed; keeping the previous result")
		}
		return
	}
	if old := w.Current(); old != nil && SameResult(old, res) {
		return
	}
	w.publish(ctx, res)
}

func (w *Watcher) refresh(ctx context.Context) {
	old := w.Current()
	if old == nil {
		w.scan(ctx)
		return
	}
	if res, changed := w.Scanner.RefreshContext(ctx, old); changed && ctx.Err() == nil {
		w.publish(ctx, res)
	}
}

func (w *Watcher) publish(ctx context.Context, res *Result) {
	w.mu.Lock()
	w.current = res
	w.mu.Unlock()
	if w.OnChange != nil {
		w.OnChange(ctx, res)
	}
}

// SameResult reports whether two results describe the same cards, ports,
// IDs, health and errors (read at any time).
func SameResult(a, b *Result) bool {
	if !slices.Equal(a.Drivers, b.Drivers) || len(a.Errors) != len(b.Errors) {
		return false
	}
	for i := range a.Errors {
		if a.Errors[i].Error() != b.Errors[i].Error() {
			return false
		}
	}
	return slices.EqualFunc(a.Cards, b.Cards, func(x, y *Card) bool {
		cx, cy := *x, *y
		cx.readAt, cy.readAt = time.Time{}, time.Time{}
		return reflect.DeepEqual(cx, cy)
	})
}

// Start runs the watcher in the background until ctx ends and returns once
// the first scan was handed to OnChange, or with the first scan's error.
// The returned channel is closed when the watcher has stopped.
func (w *Watcher) Start(ctx context.Context) (<-chan struct{}, error) {
	first := make(chan struct{})
	var once sync.Once
	onChange := w.OnChange
	w.OnChange = func(ctx context.Context, res *Result) {
		if onChange != nil {
			onChange(ctx, res)
		}
		once.Do(func() { close(first) })
	}
	done := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		defer close(done)
		runErr <- w.Run(ctx)
	}()
	select {
	case <-first:
		return done, nil
	case err := <-runErr:
		return done, err
	case <-ctx.Done():
		return done, context.Cause(ctx)
	}
}

// Report logs what an admin needs to know about a result: no kernel
// driver below root, no usable card, and every card or port left out.
func (r *Result) Report(logger klog.Logger, root string) {
	switch {
	case len(r.Drivers) == 0:
		logger.Info("No FPGA kernel driver is loaded (none of sys/class/fpga, sys/class/fpga_region, sys/bus/pci/drivers/xocl exists below the root): offering no devices", "root", root)
	case len(r.Cards) == 0:
		logger.Info("No usable FPGA card found", "kernelDrivers", r.Drivers)
	}
	for _, err := range r.Errors {
		logger.Error(err, "FPGA card or port is not usable and is not offered")
	}
}
