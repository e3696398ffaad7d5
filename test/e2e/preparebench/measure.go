package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

const namespace = "default"

// samples are the latencies of one driver's calls.
type samples struct{ prepare, unprepare []time.Duration }

// measure creates claims allocated to d's devices and has workers
// goroutines each prepare and unprepare its share on its own device, one
// claim after another, timing every call. The claims are deleted after.
func measure(ctx context.Context, c *localcluster.Cluster, d *driver, tag string, workers, claims int) (samples, error) {
	perWorker := make([][]*resourceapi.ResourceClaim, workers)
	for i := range claims {
		w := i % workers
		claim, err := allocatedClaim(ctx, c, d, fmt.Sprintf("%s-%s-%d", d.name, tag, i), d.devices[w])
		if err != nil {
			return samples{}, err
		}
		perWorker[w] = append(perWorker[w], claim)
	}
	defer deleteClaims(c, perWorker)
	var mu sync.Mutex
	var out samples
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for _, mine := range perWorker {
		wg.Go(func() {
			s, err := d.prepareEach(ctx, mine)
			mu.Lock()
			out.prepare = append(out.prepare, s.prepare...)
			out.unprepare = append(out.unprepare, s.unprepare...)
			mu.Unlock()
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// prepareEach prepares and then unprepares each claim, as the kubelet does
// for a pod's claim, and times both calls.
func (d *driver) prepareEach(ctx context.Context, claims []*resourceapi.ResourceClaim) (samples, error) {
	var s samples
	for _, claim := range claims {
		ref := []*drapbv1.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}
		start := time.Now()
		prep, err := d.client.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: ref})
		s.prepare = append(s.prepare, time.Since(start))
		if err != nil {
			return s, fmt.Errorf("prepare %s: %w", claim.Name, err)
		}
		if r := prep.Claims[string(claim.UID)]; r == nil || r.Error != "" || len(r.Devices) == 0 {
			return s, fmt.Errorf("prepare %s: %+v", claim.Name, r)
		}
		if d.writesStatus {
			if err := d.waitStatus(ctx, claim); err != nil {
				return s, err
			}
		}
		start = time.Now()
		unprep, err := d.client.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: ref})
		s.unprepare = append(s.unprepare, time.Since(start))
		if err != nil {
			return s, fmt.Errorf("unprepare %s: %w", claim.Name, err)
		}
		if r := unprep.Claims[string(claim.UID)]; r == nil || r.Error != "" {
			return s, fmt.Errorf("unprepare %s: %+v", claim.Name, r)
		}
	}
	return s, nil
}

// waitStatus waits until the driver reported the claim's device in its
// status, as it does long before a pod ends: the write is part of every
// prepare's cost, and the unprepare does not overlap it.
func (d *driver) waitStatus(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := d.claims.Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read claim %s: %w", claim.Name, err)
		}
		if slices.ContainsFunc(got.Status.Devices, func(s resourceapi.AllocatedDeviceStatus) bool { return s.Driver == d.driverName }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never reported claim %s in its status", d.name, claim.Name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond): // polling another process's write
		}
	}
}

// allocatedClaim creates a claim of one request and writes the allocation
// the scheduler would: device of d in the node's pool.
func allocatedClaim(ctx context.Context, c *localcluster.Cluster, d *driver, name, device string) (*resourceapi.ResourceClaim, error) {
	claims := c.Client.ResourceV1().ResourceClaims(namespace)
	claim, err := claims.Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "bench"},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create claim %s: %w", name, err)
	}
	now := metav1.Now()
	claim.Status.Allocation = &resourceapi.AllocationResult{
		AllocationTimestamp: &now,
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "dev", Driver: d.driverName, Pool: c.NodeName, Device: device,
		}}},
	}
	if claim, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("allocate claim %s: %w", name, err)
	}
	return claim, nil
}

// deleteClaims deletes the claims of a measurement (errors are of no
// consequence to the figures).
func deleteClaims(c *localcluster.Cluster, perWorker [][]*resourceapi.ResourceClaim) {
	var wg sync.WaitGroup
	for _, claims := range perWorker {
		wg.Go(func() {
			for _, claim := range claims {
				_ = c.Client.ResourceV1().ResourceClaims(namespace).Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
			}
		})
	}
	wg.Wait()
}
