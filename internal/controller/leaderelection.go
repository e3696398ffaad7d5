package controller

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// LeaderElection configures RunLeaderElected.
type LeaderElection struct {
	Client kubernetes.Interface
	// Namespace and Name locate the coordination.k8s.io Lease.
	Namespace, Name string
	// Identity is this replica's holder identity, e.g. the pod name.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go's
	// leaderelection.LeaderElectionConfig.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Healthz, when set, reports unhealthy once this replica holds the lease
	// but failed to renew it for longer than its timeout: wire its Check
	// into /healthz.
	Healthz *leaderelection.HealthzAdaptor
}

// ErrLostLeadership is returned by RunLeaderElected when the lease was lost
// before ctx was done: the process should exit and restart as a follower.
var ErrLostLeadership = errors.New("lost the leader election lease")

// RunLeaderElected runs lead while this replica holds the Lease, and waits
// as a follower until then. lead's context is cancelled when the lease is
// lost or ctx is done. RunLeaderElected returns after lead has returned:
// nil when ctx is done (the lease is released), ErrLostLeadership when the
// lease was lost, or a configuration error.
func RunLeaderElected(ctx context.Context, le LeaderElection, lead func(ctx context.Context)) error {
	logger := klog.FromContext(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     le.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	var lost bool
	var leading atomic.Bool
	done := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.Name,
		WatchDog:        le.Healthz,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				// Store before the context check: a Run that returned
				// before this goroutine started has cancelled ctx, so lead
				// never starts unwaited for.
				leading.Store(true)
				defer close(done)
				if ctx.Err() != nil {
					return
				}
				logger.Info("Became the leader", "lease", klog.KRef(le.Namespace, le.Name), "identity", le.Identity)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
			},
			OnNewLeader: func(identity string) {
				if identity != le.Identity {
					logger.Info("Following the leader", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election with Lease %s/%s: %w", le.Namespace, le.Name, err)
	}
	elector.Run(ctx)
	// Run cancelled lead's context; wait until lead has stopped.
	if leading.Load() {
		<-done
	}
	if lost {
		return ErrLostLeadership
	}
	return nil
}
