package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Stale legacy holds.
//
// While the endpoint serves, a later Allocate for the same resource
// supersedes a legacy hold (see holder.go); a hold made for a resource the
// endpoint no longer serves (an earlier mode's) gets no such Allocate, and
// a node that served the endpoint and now serves DRA gets no Allocate at
// all, so such holds would outlive the containers that had the ports and
// refuse every allocation and claim for them. The kubelet's pod-resources API
// says which devices its containers still have; a legacy holder that no
// container has is released.

// DefaultPodResourcesSocket is where the kubelet serves its pod-resources
// API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// defaultStaleInterval is how often StaleReleaser.Run asks when its
// interval is not positive.
const defaultStaleInterval = 30 * time.Second

// LegacyHolders returns the legacy holders in st, sorted.
func LegacyHolders(st *state.State) []types.UID {
	var uids []types.UID
	for _, uid := range st.Holders() {
		if IsLegacyHolder(uid) && !slices.Contains(uids, uid) {
			uids = append(uids, uid)
		}
	}
	slices.Sort(uids)
	return uids
}

// StaleReleaser releases the legacy holds of State that no container has
// any more. It must not run while the endpoint serves: a device the kubelet
// has just been allocated shows in the pod-resources list only once the
// kubelet has recorded it.
type StaleReleaser struct {
	State *state.State
	Pods  podresourcesv1.PodResourcesListerClient
	// Only, when set, limits the release to holders it accepts, by the
	// resource they were made for and their devices: while the endpoint
	// serves (Plugin.Releasable), those no Allocate can be recording: of
	// a resource it does not serve (an earlier mode's), or whose ports it
	// no longer offers under their resource (their AFU changed).
	Only func(resource string, devices []string) bool
	// Self, when set, is this daemon's own pod ("namespace/name"): a list
	// without it comes from a kubelet that has not synced its pods (it
	// restarted and cannot reach the API server yet, while the containers
	// it had keep running) and proves nothing.
	Self string

	// unused are the holders the previous Pass found no container using,
	// with their versions read before that Pass listed the pods.
	unused map[types.UID]state.Version
}

// Pass lists the kubelet's pod resources once and returns the legacy
// holders it released. A holder is released only when this list and the
// previous Pass's both show no container using it: a kubelet that has just
// restarted may list no pods until it has synced them. A holder is in use
// when a container has, under the holder's resource name, a device ID that
// is one of its ports or their card (its name, region mode), or one devs does
// not know (a card that failed discovery or was renumbered keeps its hold).
func (r *StaleReleaser) Pass(ctx context.Context, devs *discovery.Result) ([]types.UID, error) {
	holders := r.candidates()
	if len(holders) == 0 {
		r.unused = nil
		return nil, nil
	}
	// Read before the list: an Allocate of a holder after this may be
	// missing from the list, and changes the holder's version.
	versions := make(map[types.UID]state.Version, len(holders))
	for _, uid := range holders {
		versions[uid] = r.State.Version(uid)
	}
	resp, err := r.Pods.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list the kubelet's pod resources: %w", err)
	}
	if r.Self != "" && !slices.ContainsFunc(resp.GetPodResources(), func(p *podresourcesv1.PodResources) bool {
		return p.GetNamespace()+"/"+p.GetName() == r.Self
	}) {
		return nil, fmt.Errorf("the kubelet's pod-resources list lacks this daemon's own pod %s: the kubelet has not synced its pods (restarted without the API server?), so the list proves nothing and no hold is released", r.Self)
	}
	// The DRA devices each kubelet device ID stands for, in either mode.
	devices := map[string][]string{}
	for _, c := range devs.Cards {
		for _, p := range c.Ports {
			if c.Legacy.DeviceID != "" {
				devices[c.Legacy.DeviceID] = append(devices[c.Legacy.DeviceID], p.DeviceName())
				continue
			}
			devices[afDeviceID(p)] = append(devices[afDeviceID(p)], p.DeviceName())
			devices[regionDeviceID(c)] = append(devices[regionDeviceID(c)], p.DeviceName())
		}
	}
	type use struct{ resource, device string }
	inUse := map[use]bool{}
	// The kubelet's device IDs a container was given, by resource: a hold
	// whose record names one of them (the ID the port had when it was
	// allocated) is in use even when the cards were re-enumerated since
	// and discovery maps that ID to another port now.
	listed := map[use]bool{}
	unknown := map[string]bool{} // resources with a device ID devs lacks
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			for _, d := range c.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					listed[use{d.GetResourceName(), id}] = true
					names, ok := devices[id]
					if !ok {
						unknown[d.GetResourceName()] = true
					}
					for _, name := range names {
						inUse[use{d.GetResourceName(), name}] = true
						// Under any resource: for a hold rebuilt from
						// its CDI spec, whose record names none.
						inUse[use{"", name}] = true
					}
				}
			}
		}
	}
	unused := map[types.UID]state.Version{}
	var released []types.UID
	for _, uid := range holders {
		rec, ok := r.State.Claim(uid)
		if !ok || unknown[rec.Name] ||
			slices.ContainsFunc(rec.Devices, func(d state.DeviceRecord) bool {
				return inUse[use{rec.Name, d.Device}] || slices.ContainsFunc(d.Requests, func(id string) bool { return listed[use{rec.Name, id}] })
			}) {
			continue
		}
		unused[uid] = versions[uid]
		before, seen := r.unused[uid]
		if !seen || before != versions[uid] {
			continue // confirmed by the next list
		}
		// Unchanged since before the previous list: no Allocate came
		// that either list could have missed.
		err := r.State.Unprepare(ctx, uid, state.IfUnchanged(before))
		if errors.Is(err, state.ErrChanged) {
			delete(unused, uid)
			continue
		}
		if err != nil {
			return released, fmt.Errorf("release stale legacy holder %s: %w", uid, err)
		}
		delete(unused, uid)
		klog.FromContext(ctx).Info("Released a device-plugin hold no container has any more", "holder", uid, "resource", rec.Name)
		released = append(released, uid)
	}
	r.unused = unused
	return released, nil
}

// candidates are the legacy holders Pass may release.
func (r *StaleReleaser) candidates() []types.UID {
	holders := LegacyHolders(r.State)
	if r.Only == nil {
		return holders
	}
	records := map[types.UID]state.ClaimRecord{}
	for _, rec := range r.State.Records() {
		records[types.UID(rec.UID)] = rec
	}
	return slices.DeleteFunc(holders, func(uid types.UID) bool {
		rec, ok := records[uid]
		if !ok {
			return true
		}
		devices := make([]string, len(rec.Devices))
		for i, d := range rec.Devices {
			devices[i] = d.Device
		}
		return !r.Only(rec.Name, devices)
	})
}

// ReleaseStaleHolds runs StaleReleaser passes at once and then every
// interval (30 s when not positive) until st holds no legacy holder or ctx
// ends, dialing the kubelet's pod-resources socket only when there is
// something to release. devs returns the node's current devices; self is
// StaleReleaser.Self. With only set (see StaleReleaser.Only: the endpoint
// serves), it releases only the holders only accepts and runs until ctx
// ends, as such holders can appear later (a port's AFU changed under its
// container). Failures are logged and retried.
func ReleaseStaleHolds(ctx context.Context, st *state.State, socket string, interval time.Duration, devs func() *discovery.Result, only func(resource string, devices []string) bool, self string) {
	logger := klog.FromContext(ctx)
	if only == nil && len(LegacyHolders(st)) == 0 {
		return
	}
	if interval <= 0 {
		interval = defaultStaleInterval
	}
	logger.Info("Releasing device-plugin holds of earlier modes once no container has their devices", "holders", LegacyHolders(st), "podResourcesSocket", socket)
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		logger.Error(err, "Cannot release stale device-plugin holds: dial the kubelet's pod-resources API", "socket", socket)
		return
	}
	defer conn.Close()
	r := &StaleReleaser{State: st, Pods: podresourcesv1.NewPodResourcesListerClient(conn), Only: only, Self: self}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := r.Pass(callCtx, devs())
		cancel()
		if err != nil {
			logger.Error(err, "Releasing stale device-plugin holds; retrying", "interval", interval)
		}
		if only == nil && len(LegacyHolders(st)) == 0 {
			logger.Info("No device-plugin hold remains")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
