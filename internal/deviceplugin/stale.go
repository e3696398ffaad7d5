package deviceplugin

import (
	"context"
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
// While the endpoint serves, a later Allocate supersedes a legacy hold (see
// holder.go). A node that served the endpoint and now serves DRA gets no
// Allocate, so its legacy holds would outlive the containers that had the
// ports and refuse every claim for them. The kubelet's pod-resources API
// says which devices its containers still have; a legacy holder none of
// whose ports a container has is released.

// DefaultPodResourcesSocket is where the kubelet serves its pod-resources
// API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

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

// ReleaseStale unprepares every legacy holder of st none of whose ports any
// container has under the holder's resource name, as pods lists them, and
// returns the holders it released. devs maps the kubelet's device IDs (port
// node names) to ports. It must not run while the endpoint serves: a port
// the kubelet has just been allocated shows in the list only once the
// kubelet has recorded it.
func ReleaseStale(ctx context.Context, st *state.State, pods podresourcesv1.PodResourcesListerClient, devs *discovery.Result) ([]types.UID, error) {
	holders := LegacyHolders(st)
	if len(holders) == 0 {
		return nil, nil
	}
	resp, err := pods.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list the kubelet's pod resources: %w", err)
	}
	device := map[string]string{} // port node name -> DRA device name
	for _, p := range devs.Ports() {
		device[p.Node.Name] = p.DeviceName()
	}
	type use struct{ resource, device string }
	inUse := map[use]bool{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			for _, d := range c.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					if name, ok := device[id]; ok {
						inUse[use{d.GetResourceName(), name}] = true
					}
				}
			}
		}
	}
	var released []types.UID
	for _, uid := range holders {
		rec, ok := st.Claim(uid)
		if !ok {
			continue
		}
		if slices.ContainsFunc(rec.Devices, func(d state.DeviceRecord) bool { return inUse[use{rec.Name, d.Device}] }) {
			continue
		}
		if err := st.Unprepare(ctx, uid); err != nil {
			return released, fmt.Errorf("release stale legacy holder %s: %w", uid, err)
		}
		klog.FromContext(ctx).Info("Released a device-plugin hold no container has any more", "holder", uid, "resource", rec.Name)
		released = append(released, uid)
	}
	return released, nil
}

// ReleaseStaleHolds runs ReleaseStale at once and then every interval until
// st holds no legacy holder or ctx ends, dialing the kubelet's pod-resources
// socket only while there is something to release. devs returns the node's
// current devices. Failures are logged and retried.
func ReleaseStaleHolds(ctx context.Context, st *state.State, socket string, interval time.Duration, devs func() *discovery.Result) {
	logger := klog.FromContext(ctx)
	if len(LegacyHolders(st)) == 0 {
		return
	}
	logger.Info("Device-plugin holds remain from an earlier mode; releasing each once no container has its ports", "holders", LegacyHolders(st), "podResourcesSocket", socket)
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		logger.Error(err, "Cannot release stale device-plugin holds: dial the kubelet's pod-resources API", "socket", socket)
		return
	}
	defer conn.Close()
	pods := podresourcesv1.NewPodResourcesListerClient(conn)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := ReleaseStale(callCtx, st, pods, devs())
		cancel()
		if err != nil {
			logger.Error(err, "Releasing stale device-plugin holds; retrying", "interval", interval)
		}
		if len(LegacyHolders(st)) == 0 {
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
