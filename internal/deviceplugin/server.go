package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// resourceServer is the device-plugin gRPC service of one resource on its
// own socket. The device list is guarded by mu; the serving fields (srv,
// socket, registeredWith) belong to the plugin's sync goroutine.
type resourceServer struct {
	pluginapi.UnimplementedDevicePluginServer
	plugin *Plugin
	// name is the resource name without the domain, fullName with it.
	name, fullName string
	// endpoint is the socket's file name in the device-plugin directory.
	endpoint string

	mu      sync.Mutex
	devices []*device
	byID    map[string]*device
	// changed is closed and replaced whenever the advertised list changes.
	changed chan struct{}
	// removed is closed when the resource is no longer advertised.
	removed chan struct{}

	srv            *grpc.Server
	socket         fileID
	registeredWith fileID
}

var _ pluginapi.DevicePluginServer = &resourceServer{}

// newResourceServer serves the resource fullName ("domain/name").
func newResourceServer(p *Plugin, fullName string) *resourceServer {
	domain, name, _ := strings.Cut(fullName, "/")
	return &resourceServer{
		plugin:   p,
		name:     name,
		fullName: fullName,
		endpoint: endpointName(p.cfg.Dir, domain, name),
		byID:     map[string]*device{},
		changed:  make(chan struct{}),
		removed:  make(chan struct{}),
	}
}

// options are the device-plugin options, the same in registration and in
// GetDevicePluginOptions. PreStartContainer is not needed: Allocate does
// all the work, and region programming happens in the createRuntime hook.
func options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// setDevices replaces the device list and wakes the ListAndWatch streams
// when what the kubelet sees changed.
func (r *resourceServer) setDevices(devices []*device) {
	r.mu.Lock()
	defer r.mu.Unlock()
	same := len(devices) == len(r.devices)
	for i := 0; same && i < len(devices); i++ {
		a, b := devices[i], r.devices[i]
		same = a.id == b.id && a.healthy == b.healthy && a.card.NUMANode == b.card.NUMANode
	}
	r.devices = devices
	r.byID = make(map[string]*device, len(devices))
	for _, d := range devices {
		r.byID[d.id] = d
	}
	if !same {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// snapshot returns the advertised list and the channel closed at its next
// change.
func (r *resourceServer) snapshot() ([]*pluginapi.Device, []*device, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list := make([]*pluginapi.Device, len(r.devices))
	for i, d := range r.devices {
		list[i] = d.api()
	}
	return list, r.devices, r.changed
}

// lookup returns the devices with the given IDs.
func (r *resourceServer) lookup(ids []string) ([]*device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*device, 0, len(ids))
	for _, id := range ids {
		d := r.byID[id]
		if d == nil {
			known := make([]string, 0, len(r.devices))
			for _, d := range r.devices {
				known = append(known, d.id)
			}
			return nil, status.Errorf(codes.NotFound, "device %q is not a device of resource %s (it has %s): the node's devices changed since the kubelet's last list",
				id, r.fullName, strings.Join(known, ", "))
		}
		if slices.Contains(out, d) {
			return nil, status.Errorf(codes.InvalidArgument, "device %q of resource %s is requested twice for one container", id, r.fullName)
		}
		out = append(out, d)
	}
	return out, nil
}

// GetDevicePluginOptions implements pluginapi.DevicePluginServer.
func (r *resourceServer) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return options(), nil
}

// ListAndWatch implements pluginapi.DevicePluginServer: the full list at
// once and again at every change of a device's presence, health or NUMA
// node, until the kubelet hangs up or the resource goes away.
func (r *resourceServer) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	logger := klog.FromContext(r.plugin.ctx).WithValues("resource", r.fullName)
	for {
		list, _, changed := r.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: list}); err != nil {
			return err
		}
		logger.V(4).Info("Sent device list", "devices", list)
		select {
		case <-changed:
		case <-r.removed:
			return nil
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation implements pluginapi.DevicePluginServer.
func (r *resourceServer) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p := r.plugin
	res := p.Devices()
	r.mu.Lock()
	devs := r.byID
	r.mu.Unlock()
	// Only devices an Allocate would take now are proposed: the kubelet
	// may ask before it read the latest list, and holds change between
	// lists (a claim, an admin's programming). A full answer is used as
	// it is, and a refused Allocate fails the pod.
	h := currentHolds(p.cfg.State, res)
	usable := func(id string) bool {
		d := devs[id]
		if d == nil {
			return true // unknown: preferred puts it last
		}
		ok, _ := health(r.fullName, d.id, d.ports, h)
		return ok
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		available := slices.DeleteFunc(slices.Clone(c.AvailableDeviceIDs), func(id string) bool { return !usable(id) })
		ids := preferred(devs, available, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate implements pluginapi.DevicePluginServer (see Plugin.allocate).
func (r *resourceServer) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return r.plugin.allocate(ctx, r, req)
}

// PreStartContainer implements pluginapi.DevicePluginServer. The kubelet
// does not call it (PreStartRequired is false); it succeeds.
func (r *resourceServer) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve (re)creates the resource's socket and serves on it. Any earlier
// server is stopped first, which ends its ListAndWatch streams.
func (r *resourceServer) serve(path string) error {
	r.stopServing(path)
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	id, err := statID(path)
	if err != nil {
		lis.Close()
		return fmt.Errorf("stat %s: %w", path, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	r.srv, r.socket, r.registeredWith = srv, id, fileID{}
	return nil
}

// stopServing stops the gRPC server and removes the socket file if it is
// still the one this server created.
func (r *resourceServer) stopServing(path string) {
	if r.srv == nil {
		return
	}
	r.srv.Stop()
	if id, err := statID(path); err == nil && id == r.socket {
		_ = os.Remove(path)
	}
	r.srv, r.socket, r.registeredWith = nil, fileID{}, fileID{}
}
