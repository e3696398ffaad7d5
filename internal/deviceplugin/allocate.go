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
// legacy holder in the shared state (see holder.go): an earlier legacy
// holder of any of them made for r is superseded in the same step; a legacy
// holder made for another resource (another mode's) or a DRA claim's hold
// refuses the call. The container gets:
//
//   - a device spec per node of each port (rw; a management node among
//     them refuses the call),
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
	devices, devs, err := p.lookup(r, ids)
	if err != nil {
		return nil, err
	}
	var ports []*discovery.Port
	var cards []*discovery.Card
	var reqs []state.DeviceRequest
	// Cards advertised under their vendor's names are handed over as they
	// are: no programming hook, whatever the mode.
	mode := p.cfg.Mode
	for _, d := range devices {
		if d.card.Legacy.Resource != "" {
			mode = ModeAF
		}
		for _, port := range d.ports {
			ports = append(ports, port)
			cards = append(cards, d.card)
			reqs = append(reqs, state.DeviceRequest{Device: port.DeviceName(), Requests: []string{d.id}})
		}
	}
	h := legacyHolder(mode, r.fullName, ports)
	nodes := make([][]discovery.DevNode, len(ports))
	for i, port := range ports {
		if nodes[i], err = cdi.ContainerNodes(cards[i], port); err != nil {
			return nil, status.Errorf(codes.Internal, "allocate %s devices %s: %v", r.fullName, strings.Join(ids, ","), err)
		}
	}
	if err := p.releaseReissued(ctx, r.fullName, reqs); err != nil {
		return nil, status.Errorf(codes.Internal, "allocate %s devices %s: %v", r.fullName, strings.Join(ids, ","), err)
	}
	if err := p.notReachedByStaleNumbers(r.fullName, h.UID, reqs, devs); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "allocate %s devices %s: %v", r.fullName, strings.Join(ids, ","), err)
	}
	if err := p.sameKubeletIDs(r.fullName, reqs); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "allocate %s devices %s: %v", r.fullName, strings.Join(ids, ","), err)
	}
	mine, err := p.supersedable(r.fullName, h.UID, reqs)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "allocate %s devices %s: %v", r.fullName, strings.Join(ids, ","), err)
	}

	opts := []state.PrepareOption{state.Supersede(func(uid types.UID) bool { return slices.Contains(mine, uid) })}
	// A record not current, or rebuilt from a CDI spec after damage
	// (naming no resource), is written anew.
	if rec, ok := p.cfg.State.Claim(h.UID); ok && (!current(rec, reqs, devs) || rec.Name != r.fullName) {
		opts = append(opts, state.Rebuild())
	}
	out, err := p.cfg.State.Prepare(ctx, h, reqs, devs, opts...)
	if err != nil {
		code := codes.Internal
		hint := ""
		if errors.Is(err, state.ErrDeviceHeld) {
			code = codes.FailedPrecondition
			hint = ": a port is never given to a DRA claim and a device-plugin container at once; delete the claim's pod or run this node in one mode only"
		}
		return nil, status.Errorf(code, "allocate %s devices %s: %v%s", r.fullName, strings.Join(ids, ","), err, hint)
	}

	cr := &pluginapi.ContainerAllocateResponse{}
	envDevices := make([]cdi.Device, len(ports))
	for i, port := range ports {
		for _, n := range nodes[i] {
			cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{ContainerPath: n.Path, HostPath: n.HostPath, Permissions: devicePermissions})
		}
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
	if p.cfg.CDI && mode == ModeRegion && p.cfg.HookDevice != "" {
		cr.CdiDevices = append(cr.CdiDevices, &pluginapi.CDIDevice{Name: p.cfg.HookDevice})
	}
	klog.FromContext(ctx).V(2).Info("Allocated", "devices", ids, "holder", h.UID, "ports", len(ports))
	return cr, nil
}

// supersedable returns the legacy holders of reqs' ports that the holder
// uid of resource fullName may supersede: those made for fullName, whose
// devices the kubelet hands out again only once their container ended. A
// port held for another resource (another mode's, or an af resource of an
// AFU the port no longer carries) is refused: the kubelet tracks each
// resource on its own, so that resource's container may still be running.
// A holder whose record is not written yet (an Allocate in flight) is
// neither: the state refuses it.
func (p *Plugin) supersedable(fullName string, uid types.UID, reqs []state.DeviceRequest) ([]types.UID, error) {
	holders := p.cfg.State.Holders()
	resources := legacyResources(p.cfg.State)
	var mine []types.UID
	for _, rq := range reqs {
		other := holders[rq.Device]
		resource, legacy := resources[other]
		switch {
		case other == "" || !legacy:
		case other == uid && resource == "":
			// Its own record, rebuilt from its CDI spec after damage
			// (which names no resource): the allocation rebuilds it.
		case resource == fullName:
			if other != uid && !slices.Contains(mine, other) {
				mine = append(mine, other)
			}
		default:
			// Also when other is uid: an af holder's UID names the port,
			// not the AFU.
			return nil, fmt.Errorf("port %s is held by device-plugin holder %s for resource %s, not %s: a container given the port under that resource (before the node's device-plugin mode or the port's AFU changed) may still be running; "+
				"the hold is released once the kubelet's pod-resources API lists no container with the port (checked every --refresh-interval), or end that container", rq.Device, other, resource, fullName)
		}
	}
	return mine, nil
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

// lookup resolves the kubelet's device IDs of resource r, and returns
// them with the discovery result they were advertised from: both are
// swapped together (onDevicesChanged), so the ports handed to the
// container and those prepared are the same.
func (p *Plugin) lookup(r *resourceServer, ids []string) ([]*device, *discovery.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	devices, err := r.lookup(ids)
	return devices, p.devices, err
}

// heldDevice is a device a legacy hold holds, as its record has it.
type heldDevice struct {
	uid types.UID
	state.DeviceRecord
}

// heldUnder lists the devices the legacy holds of resource fullName hold.
func (p *Plugin) heldUnder(fullName string) []heldDevice {
	holders := p.cfg.State.Holders()
	var out []heldDevice
	for _, rec := range p.cfg.State.Records() {
		uid := types.UID(rec.UID)
		if !IsLegacyHolder(uid) || rec.Name != fullName {
			continue
		}
		for _, d := range rec.Devices {
			if holders[d.Device] == uid {
				out = append(out, heldDevice{uid, d})
			}
		}
	}
	return out
}

// sameKubeletIDs refuses a port that a legacy hold recorded under another
// kubelet device ID: the cards were re-enumerated since, the kubelet
// still counts the old ID as the running container's and the new one as
// free, so neither re-allocating nor superseding the hold is safe. Holds
// of another resource are supersedable's to refuse.
func (p *Plugin) sameKubeletIDs(fullName string, reqs []state.DeviceRequest) error {
	for _, d := range p.heldUnder(fullName) {
		for _, rq := range reqs {
			if d.Device == rq.Device && len(d.Requests) > 0 && !slices.Equal(d.Requests, rq.Requests) {
				return fmt.Errorf("port %s was allocated as %v and is %v now (the cards were re-enumerated): the container given %v may still run; it is released once the kubelet lists no container with it", rq.Device, d.Requests, rq.Requests, d.Requests)
			}
		}
	}
	return nil
}

// notReachedByStaleNumbers refuses a port that a running container of
// another holder may reach by a device number it was given before the
// cards were enumerated anew (holds.reachedByStaleNumber): the kubelet,
// which knows only IDs, sees the port free under its new ID or under
// another resource. It runs after releaseReissued, which releases the
// holds whose containers the kubelet says have ended.
func (p *Plugin) notReachedByStaleNumbers(fullName string, uid types.UID, reqs []state.DeviceRequest, devs *discovery.Result) error {
	h := currentHolds(p.cfg.State, devs)
	for _, rq := range reqs {
		for _, id := range rq.Requests {
			if rh, ok := h.reachedByStaleNumber(fullName, id, rq.Device); ok && rh.UID != uid {
				return fmt.Errorf("port %s has a device number that a running container of %s was given for another port before the cards were enumerated anew: that container may still reach it; it is released once the kubelet lists no container with it", rq.Device, rh)
			}
		}
	}
	return nil
}

// releaseReissued releases the legacy holds of resource fullName on other
// ports whose records name one of reqs' kubelet IDs: the kubelet hands an
// ID out again only once the container it gave it to has ended, so after
// a renumbering such a hold (its port now under another ID) is that ended
// container's, and would otherwise stay held as long as the new container
// with the re-issued ID runs.
func (p *Plugin) releaseReissued(ctx context.Context, fullName string, reqs []state.DeviceRequest) error {
	// The ports each kubelet ID is asked for now: a hold recording the ID
	// on another port is the ended container's, also when that port is
	// asked for too, under another ID (both IDs handed out again).
	asked := map[string][]string{}
	for _, rq := range reqs {
		for _, id := range rq.Requests {
			asked[id] = append(asked[id], rq.Device)
		}
	}
	stale := map[types.UID]bool{}
	for _, d := range p.heldUnder(fullName) {
		for _, id := range d.Requests {
			if ports, ok := asked[id]; ok && !slices.Contains(ports, d.Device) {
				stale[d.uid] = true
			}
		}
	}
	for uid := range stale {
		klog.FromContext(ctx).Info("Releasing a device-plugin hold whose kubelet device ID was handed out again", "holder", uid)
		if err := p.cfg.State.Unprepare(ctx, uid); err != nil {
			return fmt.Errorf("release hold %s, whose kubelet device ID was handed out again: %w", uid, err)
		}
	}
	return nil
}
