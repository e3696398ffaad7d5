package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// devicePermissions lets a container read and write a port node but not
// create device nodes, as the CDI spec does.
const devicePermissions = "rw"

// allocate serves one Allocate call for resource r. Each container's
// devices are resolved to their ports, which are held for the container's
// legacy holder in the shared state (see holder.go; an earlier legacy
// holder of any of them is superseded, a DRA claim's hold refuses the
// call). The container gets:
//
//   - a device spec per port node (rw; never the FME node),
//   - FPGA_PORTS, FPGA_AFU_IDS, FPGA_INTERFACE_IDS and ACCELERATOR_UNITS,
//     one comma-separated entry per port, as the DRA path's CDI spec sets
//     them,
//   - with CDI on, the CDI devices of the ports and, in region mode, the
//     CDI device that carries the programming hook.
func (p *Plugin) allocate(ctx context.Context, r *resourceServer, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	logger := klog.LoggerWithValues(klog.FromContext(p.ctx), "resource", r.fullName)
	ctx = klog.NewContext(ctx, logger)
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.ContainerRequests))}
	for _, c := range req.ContainerRequests {
		cr, err := p.allocateContainer(ctx, r, c.DevicesIds)
		if err != nil {
			logger.Error(err, "Allocate failed", "devices", c.DevicesIds)
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (p *Plugin) allocateContainer(ctx context.Context, r *resourceServer, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	if len(ids) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "allocate %s: a container request names no device", r.fullName)
	}
	devices, err := r.lookup(ids)
	if err != nil {
		return nil, err
	}
	devs := p.Devices()
	var ports []*discovery.Port
	var cards []*discovery.Card
	var reqs []state.DeviceRequest
	for _, d := range devices {
		for _, port := range d.ports {
			ports = append(ports, port)
			cards = append(cards, d.card)
			reqs = append(reqs, state.DeviceRequest{Device: port.DeviceName(), Requests: []string{d.id}})
		}
	}
	h := legacyHolder(p.cfg.Mode, r.fullName, ports)

	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	if err := p.supersede(ctx, h.UID, reqs, devs); err != nil {
		return nil, err
	}
	out, err := p.cfg.State.Prepare(ctx, h, reqs, devs)
	if err != nil {
		code := codes.Internal
		if errors.Is(err, state.ErrDeviceHeld) {
			code = codes.FailedPrecondition
		}
		return nil, status.Errorf(code, "allocate %s devices %s: %v", r.fullName, strings.Join(ids, ","), err)
	}

	cr := &pluginapi.ContainerAllocateResponse{}
	envDevices := make([]cdi.Device, len(ports))
	for i, port := range ports {
		cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{ContainerPath: port.Node.Path, HostPath: port.Node.HostPath, Permissions: devicePermissions})
		afuID := port.AFUID
		if i < len(out.Devices) && out.Devices[i].AFUID != "" {
			afuID = out.Devices[i].AFUID
		}
		envDevices[i] = cdi.NewDevice(cards[i], port, afuID)
		if p.cfg.CDI && i < len(out.Devices) {
			for _, id := range out.Devices[i].CDIDeviceIDs {
				cr.CdiDevices = append(cr.CdiDevices, &pluginapi.CDIDevice{Name: id})
			}
		}
	}
	cr.Envs = cdi.ContainerEnv(envDevices)
	if p.cfg.CDI && p.cfg.Mode == ModeRegion && p.cfg.HookDevice != "" {
		cr.CdiDevices = append(cr.CdiDevices, &pluginapi.CDIDevice{Name: p.cfg.HookDevice})
	}
	klog.FromContext(ctx).V(2).Info("Allocated", "devices", ids, "holder", h.UID, "ports", len(ports))
	return cr, nil
}

// supersede releases the legacy holders that stand in the way of holder
// uid taking reqs' ports: every other legacy holder of one of them, and
// uid's own earlier hold when it covered other ports or an AFU that is no
// longer loaded (so its record and CDI spec are rebuilt). A port held by a
// DRA claim fails the allocation.
func (p *Plugin) supersede(ctx context.Context, uid types.UID, reqs []state.DeviceRequest, devs *discovery.Result) error {
	logger := klog.FromContext(ctx)
	st := p.cfg.State
	holders := st.Holders()
	var stale []types.UID
	for _, req := range reqs {
		h, ok := holders[req.Device]
		if !ok || h == uid {
			continue
		}
		if !IsLegacyHolder(h) {
			claim := string(h)
			if rec, ok := st.Claim(h); ok {
				claim = fmt.Sprintf("%s/%s (%s)", rec.Namespace, rec.Name, h)
			}
			return status.Errorf(codes.FailedPrecondition, "port %s (device %s) is held by DRA claim %s: a port is never given to a claim and a device-plugin container at once; delete the claim's pod or run this node in one mode only",
				req.Device, req.Requests[0], claim)
		}
		if !slices.Contains(stale, h) {
			stale = append(stale, h)
		}
	}
	if rec, ok := st.Claim(uid); ok && !current(rec, reqs, devs) {
		stale = append(stale, uid)
	}
	for _, h := range stale {
		logger.V(2).Info("Superseding earlier device-plugin allocation: the kubelet only reallocates devices whose container ended", "holder", h)
		if err := st.Unprepare(ctx, h); err != nil {
			return status.Errorf(codes.Internal, "release earlier allocation %s: %v", h, err)
		}
	}
	return nil
}

// current reports whether a holder's record covers exactly reqs' ports with
// the AFUs they carry now.
func current(rec state.ClaimRecord, reqs []state.DeviceRequest, devs *discovery.Result) bool {
	if rec.Phase != state.PhaseCompleted || len(rec.Devices) != len(reqs) {
		return false
	}
	for i, d := range rec.Devices {
		if d.Device != reqs[i].Device {
			return false
		}
		if _, port, ok := devs.FindPort(d.Device); !ok || port.AFUID != d.AFUID {
			return false
		}
	}
	return true
}
