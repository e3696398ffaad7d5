package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
)

// shutdown stops the daemon once ctx ended: it stops serving the kubelet,
// refuses calls that have not reached the node's state yet, and waits up
// to --shutdown-wait for programming in flight, keeping discovery and the
// published slices current meanwhile; programming still running then is
// cancelled and waited for jobStopWait more.
func shutdown(ctx context.Context, f runFlags, st *state.State, srv *serving) {
	logger := klog.FromContext(ctx)
	logger.Info("Shutting down", "cause", context.Cause(ctx))
	// --shutdown-wait counts from here.
	idle, cancel := context.WithTimeoutCause(context.WithoutCancel(ctx), f.shutdownWait, fmt.Errorf("--shutdown-wait %s passed", f.shutdownWait))
	defer cancel()
	srv.unregister()
	// A call the servers were still handling (an Allocate, a kubelet's
	// prepare, a control request, the stale-hold releaser's release)
	// that has not reached the State yet is refused from here on; the
	// ones that have are waited for below.
	st.Drain()
	// Discovery and the published slices stay current while programming
	// ends, but not past the kubelet's wipe of the driver's slices (when
	// no other instance registered): a slice put back after it would
	// outlive the driver.
	publishing := time.AfterFunc(min(f.shutdownWait, kubeletWipeDelay-wipeMargin), srv.stop)
	defer func() {
		publishing.Stop()
		srv.stop()
	}()
	if err := st.WaitIdle(idle); err != nil {
		logger.Error(err, "Stopping programming in flight; the next instance programs its region again")
		st.CancelJobs(err)
		stopped, cancel := context.WithTimeoutCause(context.WithoutCancel(ctx), jobStopWait, fmt.Errorf("programming did not stop within %s of its cancellation", jobStopWait))
		defer cancel()
		if err := st.WaitIdle(stopped); err != nil {
			logger.Error(err, "Stopping while a region is being programmed; the next instance finds it interrupted")
		}
	}
}

// jobStopWait bounds how long a stopping daemon waits for programming it
// cancelled (after --shutdown-wait) to end, before it releases the node's
// state lock.
const jobStopWait = 5 * time.Second

// kubeletWipeDelay is how long after the last instance of a DRA driver
// unregistered the kubelet deletes the driver's ResourceSlices (its
// defaultWipingDelay); a stopping daemon stops publishing wipeMargin
// before it.
const (
	kubeletWipeDelay = 30 * time.Second
	wipeMargin       = 5 * time.Second
)

// stopMargin is the time a stop may take beyond --shutdown-wait and
// jobStopWait (the control socket's drain, the last checkpoint flush)
// before stopDeadline ends the process.
const stopMargin = 5 * time.Second

// stopLimit is how long after a stop signal the process ends at the
// latest: the pod's terminationGracePeriodSeconds must exceed it.
func stopLimit(shutdownWait time.Duration) time.Duration {
	return shutdownWait + jobStopWait + stopMargin
}

// stopDeadline ends the process through exit(1) when run has not
// returned (returned) within limit of a stop signal: ctx ended while its
// parent did not. Whatever hangs (a read of a wedged device outside the
// bounded ones, a stuck disk), the daemon then exits within its pod's
// grace period and says so, instead of being killed without a word.
func stopDeadline(ctx, parent context.Context, limit time.Duration, returned <-chan struct{}, exit func(int)) {
	select {
	case <-returned:
		return
	case <-ctx.Done():
	}
	if parent.Err() != nil {
		return // stopped by the caller, not by a signal
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-returned:
	case <-timer.C:
		klog.FromContext(ctx).Error(nil, "Stopping took too long; exiting now", "limit", limit, "cause", context.Cause(ctx))
		klog.Flush()
		exit(1)
	}
}
