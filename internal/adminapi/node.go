package adminapi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Node is the daemon's Handler: it answers from the node's shared state
// and the latest discovery result, and programs through
// state.ProgramHeld, so the repository lookup, the interface check, the
// per-port lock and the verification are the DRA path's.
type Node struct {
	State *state.State
	// Devices returns the latest discovery result.
	Devices func() *discovery.Result
	// MayProgram says whether ports held by holder may be programmed over
	// the socket; nil refuses every program request. The daemon allows the
	// device-plugin endpoint's region-mode holders only: their container is
	// about to start and the hook programs for it.
	MayProgram func(holder types.UID) bool
	// Refresh, when set, runs after a region was programmed, so discovery
	// re-reads the new AFU ID.
	Refresh func()
	// Mode and Registered report the daemon's state in List.
	Mode       string
	Registered func() bool
}

var _ Handler = &Node{}

// Program implements Handler.
func (n *Node) Program(ctx context.Context, req ProgramRequest) (ProgramResponse, error) {
	ifID, err := discovery.CanonicalID(req.InterfaceID)
	if err != nil {
		return ProgramResponse{}, fmt.Errorf("%w: interfaceID: %v", ErrBadRequest, err)
	}
	afuID, err := discovery.CanonicalID(req.AFUID)
	if err != nil {
		return ProgramResponse{}, fmt.Errorf("%w: afuID: %v", ErrBadRequest, err)
	}
	if ifID == discovery.AllF || afuID == discovery.AllF {
		return ProgramResponse{}, fmt.Errorf("%w: the all-f ID marks an unusable region or function", ErrBadRequest)
	}
	devs := n.Devices()
	card, port, err := resolve(devs, req.Device)
	if err != nil {
		return ProgramResponse{}, err
	}
	name := port.DeviceName()
	if !card.Accepts(ifID) {
		// state.ProgramHeld checks this too; saying it first gives the
		// clearer answer whoever holds the port.
		return ProgramResponse{}, fmt.Errorf("%w: port %s (%s) is in a region with %s, not %s: request the resource region-%s, or build the AFU for interface %s",
			program.ErrInterfaceMismatch, port.Node.Path, name, program.InterfacesOf(card.Interfaces()), ifID, ifID, card.InterfaceID)
	}
	holder, held := n.State.Holders()[name]
	switch {
	case req.Admin && held:
		return ProgramResponse{}, fmt.Errorf("%w: port %s (%s) is held by %s: an administrator may program only a free port; wait until it is released", ErrRefused, port.Node.Path, name, n.holderName(holder))
	case req.Admin:
		return n.programFree(ctx, port, ifID, afuID, devs)
	case !held:
		return ProgramResponse{}, fmt.Errorf("%w: port %s (%s) is not allocated to any container: only a port the kubelet allocated in region mode can be programmed", ErrRefused, port.Node.Path, name)
	case n.MayProgram == nil || !n.MayProgram(holder):
		return ProgramResponse{}, fmt.Errorf("%w: port %s (%s) is held by %s, which is not a region-mode device-plugin allocation: DRA claims are programmed from their FpgaConfig, af-mode ports keep the function they are advertised with", ErrRefused, port.Node.Path, name, holder)
	}
	p, err := n.State.ProgramHeld(ctx, holder, name, ifID, afuID, devs)
	if p.Bitstream != "" && n.Refresh != nil {
		n.Refresh()
	}
	if err != nil {
		return ProgramResponse{}, err
	}
	return ProgramResponse{
		Device:          name,
		Node:            port.Node.Path,
		AFUID:           afuID,
		Programmed:      p.Bitstream != "",
		Bitstream:       p.Bitstream,
		DurationSeconds: p.Duration.Seconds(),
	}, nil
}

// List implements Handler.
func (n *Node) List(context.Context) (DeviceList, error) {
	devs := n.Devices()
	holders := n.State.Holders()
	list := DeviceList{Mode: n.Mode, Devices: []Device{}}
	if n.Registered != nil {
		r := n.Registered()
		list.Registered = &r
	}
	if devs == nil {
		return list, nil
	}
	list.Devices = Devices(devs, func(device string) *Holder {
		uid, ok := holders[device]
		if !ok {
			return nil
		}
		h := &Holder{UID: string(uid)}
		if rec, ok := n.State.Claim(uid); ok {
			h.Namespace, h.Name = rec.Namespace, rec.Name
		}
		return h
	})
	return list, nil
}

// resolve finds the port a request names (see ProgramRequest.Device).
func resolve(devs *discovery.Result, name string) (*discovery.Card, *discovery.Port, error) {
	if devs == nil {
		return nil, nil, fmt.Errorf("%w: %q: no devices discovered yet", ErrUnknownDevice, name)
	}
	if name == "" {
		return nil, nil, fmt.Errorf("%w: device is empty: name a port (e.g. /dev/dfl-port.0)", ErrBadRequest)
	}
	for _, c := range devs.Cards {
		for _, p := range c.Ports {
			if name == p.Node.Path || name == p.Node.Name || name == p.DeviceName() {
				return c, p, nil
			}
		}
		if m := c.ManagementNodes(); len(m) > 0 && (name == m[0].Name || name == m[0].Path) {
			if len(c.Ports) != 1 {
				ports := make([]string, len(c.Ports))
				for i, p := range c.Ports {
					ports[i] = p.Node.Path
				}
				return nil, nil, fmt.Errorf("%w: card %s (%s) has %d ports: name one of %s", ErrBadRequest, c.PCIAddress, name, len(c.Ports), strings.Join(ports, ", "))
			}
			return c, c.Ports[0], nil
		}
	}
	return nil, nil, fmt.Errorf("%w: no FPGA port or card %q on this node", ErrUnknownDevice, name)
}

// holderName names a holder for messages: namespace/name (uid).
func (n *Node) holderName(uid types.UID) string {
	if rec, ok := n.State.Claim(uid); ok {
		return fmt.Sprintf("%s/%s (%s)", rec.Namespace, rec.Name, uid)
	}
	return string(uid)
}

// adminHolderPrefix starts the UID of programFree's transient holders.
const adminHolderPrefix = "admin-program-"

// ReleaseAdminHolds releases every hold of a transient admin holder (see
// programFree) that st has: one that the daemon's end (kill -9, a crash)
// left between its prepare and its release. No kubelet ever releases
// them. Call it after State.Restore, before the control socket serves.
func ReleaseAdminHolds(ctx context.Context, st *state.State) error {
	var errs []error
	for _, rec := range st.Records() {
		uid := types.UID(rec.UID)
		if !strings.HasPrefix(rec.UID, adminHolderPrefix) {
			continue
		}
		if err := st.Unprepare(ctx, uid); err != nil {
			errs = append(errs, fmt.Errorf("release port held by admin programming (%s): %w", uid, err))
			continue
		}
		klog.FromContext(ctx).Info("Released a port an interrupted admin programming had held", "holder", uid)
	}
	return errors.Join(errs...)
}

// programFree programs a free port for an administrator: it is prepared
// for a transient admin holder through the same path as a claim (holds,
// per-port lock, repository lookup, verification), then released.
func (n *Node) programFree(ctx context.Context, port *discovery.Port, ifID, afuID string, devs *discovery.Result) (ProgramResponse, error) {
	name := port.DeviceName()
	// A holder of its own per request: of two at once for one port, one
	// is refused as held, and each releases only its own hold.
	h := state.Holder{UID: types.UID(adminHolderPrefix + name + "-" + strings.ToLower(rand.Text())), Namespace: "admin", Name: "fpga-dra-driver-program"}
	defer func() {
		logger := klog.FromContext(ctx)
		unprepare := func() error { return n.State.Unprepare(context.WithoutCancel(ctx), h.UID) }
		// finish retries while programming that cannot be stopped
		// outlives the request (its client went away): each Unprepare
		// answers ErrReleasing after the State's ReleaseWait, and the
		// port is released once the programming ended.
		finish := func(err error) {
			for errors.Is(err, state.ErrReleasing) {
				err = unprepare()
			}
			if err != nil {
				logger.Error(err, "Releasing the port after admin programming failed", "device", name)
			}
		}
		if err := unprepare(); errors.Is(err, state.ErrReleasing) {
			go finish(err)
		} else {
			finish(err)
		}
	}()
	req := []state.DeviceRequest{{Device: name, Config: &v1alpha1.FpgaConfig{AFUID: afuID, InterfaceID: ifID, Programming: v1alpha1.ProgrammingIfNeeded}}}
	for {
		out, err := n.State.Prepare(ctx, h, req, devs)
		if errors.Is(err, state.ErrInProgress) && ctx.Err() == nil {
			continue // Prepare waited its bound; the job goes on
		}
		if len(out.Programmed) > 0 && n.Refresh != nil {
			n.Refresh()
		}
		if err != nil {
			return ProgramResponse{}, err
		}
		resp := ProgramResponse{Device: name, Node: port.Node.Path, AFUID: afuID}
		if len(out.Devices) > 0 {
			resp.AFUID = out.Devices[0].AFUID
		}
		if len(out.Programmed) > 0 {
			p := out.Programmed[0]
			resp.Programmed, resp.Bitstream, resp.DurationSeconds = true, p.Bitstream, p.Duration.Seconds()
		}
		return resp, nil
	}
}

// Devices describes every port of a discovery result, with the holder
// holder returns for its DRA device name (nil: free).
func Devices(res *discovery.Result, holder func(device string) *Holder) []Device {
	out := []Device{}
	for _, c := range res.Cards {
		for _, p := range c.Ports {
			d := Device{
				Name: p.DeviceName(), Node: p.Node.Path, Major: p.Node.Major, Minor: p.Node.Minor,
				Card: c.PCIAddress, CardName: c.Name(), PCIAddress: p.PCIAddress, NUMANode: c.NUMANode,
				InterfaceID: c.InterfaceID, AFUID: p.AFUID,
				Healthy: p.Health.Healthy, Health: p.Health.String(),
				Holder: holder(p.DeviceName()),
			}
			out = append(out, d)
		}
	}
	return out
}
