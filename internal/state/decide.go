package state

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// deviceFacts is what the decision for one device of a holder depends on.
type deviceFacts struct {
	Device string
	// HeldBy names another holder of the device ("" when none);
	// Releasing says that holder is being released.
	HeldBy    string
	Releasing bool
	// InterfaceIDs are those the region accepts, LoadedAFU the AFU sysfs
	// shows, LoadedSHA, LoadedRef and LoadedLayer the digest, OCI
	// reference and cached layer of the file this driver last loaded
	// there ("" when unknown).
	InterfaceIDs []string
	LoadedAFU    string
	LoadedSHA    string
	LoadedRef    string
	LoadedLayer  string
	// Rebooted: since the holder's record was written; ProgrammedBefore:
	// the record says this driver programmed the region;
	// ProgrammedForBinding: it did so before binding, in this boot, and
	// the region carries what the record says.
	Rebooted             bool
	ProgrammedBefore     bool
	ProgrammedForBinding bool
	Programmable         bool
	HaveProgrammer       bool
}

// devicePlan is what decideDevice chose for one device.
type devicePlan struct {
	Program bool   // a job must program the region
	AFU     string // the AFU the device carries once prepared
	// Bitstream, SHA256 and Layer describe the file of the config's OCI
	// reference the region carries already, when it needs no programming.
	Bitstream, SHA256, Layer string
}

// decideDevice is the decision policy for one device of a holder: whether
// it is free, and whether its region must be programmed. It is
// deterministic and has no side effects.
//
//   - a device another holder holds is refused (ErrDeviceHeld), also while
//     that holder is being released;
//   - no config: the device is handed over as it is;
//   - a region programmed for the holder before its pod was bound (and
//     still carrying what was loaded) is not programmed again, whatever
//     the policy;
//   - a config whose interfaceID is not one the region accepts is refused
//     (program.ErrInterfaceMismatch);
//   - programming: Never needs the AFU loaded (ErrAFUNotLoaded);
//   - programming: Always programs;
//   - programming: IfNeeded programs when another AFU is loaded, when the
//     config pins a digest, or names an OCI reference, that this driver
//     did not load there, and after a reboot erased what this driver
//     loaded for the holder;
//   - programming on a node that forbids it, or without a programmer, is
//     refused (ErrNotProgrammable).
func decideDevice(cfg *v1alpha1.FpgaConfig, f deviceFacts) (devicePlan, error) {
	if f.HeldBy != "" {
		state := "prepared"
		if f.Releasing {
			state = "being released (a programming job for it is still running)"
		}
		return devicePlan{}, fmt.Errorf("%w: device %s is %s for %s; it must be unprepared before another holder can use it", ErrDeviceHeld, f.Device, state, f.HeldBy)
	}
	p := devicePlan{AFU: f.LoadedAFU}
	if cfg == nil {
		return p, nil
	}
	if cfg.InterfaceID != "" && !slices.Contains(f.InterfaceIDs, cfg.InterfaceID) {
		return devicePlan{}, fmt.Errorf("%w: device %s has %s but the claim's config asks for %s: select a device with that interface ID or drop interfaceID from the config", program.ErrInterfaceMismatch, f.Device, program.InterfacesOf(f.InterfaceIDs), cfg.InterfaceID)
	}
	p.AFU = cfg.AFUID
	if f.ProgrammedForBinding && f.LoadedAFU == cfg.AFUID {
		return p, nil
	}
	switch cfg.Programming {
	case v1alpha1.ProgrammingNever:
		if f.LoadedAFU != cfg.AFUID {
			return devicePlan{}, fmt.Errorf("%w: device %s carries AFU %s, not %s, and the config says programming: Never: select devices by afuID, or allow programming", ErrAFUNotLoaded, f.Device, orNone(f.LoadedAFU), cfg.AFUID)
		}
	case v1alpha1.ProgrammingAlways:
		p.Program = true
	default: // IfNeeded
		p.Program = f.LoadedAFU != cfg.AFUID ||
			(cfg.SHA256 != "" && f.LoadedSHA != cfg.SHA256) ||
			(cfg.BitstreamRef != "" && f.LoadedRef != cfg.BitstreamRef) ||
			(f.Rebooted && f.ProgrammedBefore)
	}
	if p.Program && !f.Programmable {
		return devicePlan{}, fmt.Errorf("%w: device %s carries AFU %s and the claim needs %s, but this node runs with --programmable=false", ErrNotProgrammable, f.Device, orNone(f.LoadedAFU), cfg.AFUID)
	}
	if p.Program && !f.HaveProgrammer {
		return devicePlan{}, fmt.Errorf("%w: device %s needs AFU %s but no programmer is configured on this node", ErrNotProgrammable, f.Device, cfg.AFUID)
	}
	if !p.Program && cfg.BitstreamRef != "" && f.LoadedRef == cfg.BitstreamRef {
		p.Bitstream, p.SHA256, p.Layer = f.LoadedRef, f.LoadedSHA, f.LoadedLayer
	}
	return p, nil
}

func orNone(afu string) string {
	if afu == "" {
		return "(none readable)"
	}
	return afu
}

// plan is what a prepare decided for one device, with what it runs on.
type plan struct {
	req  DeviceRequest
	card *discovery.Card
	port *discovery.Port
	devicePlan
	job    *job
	before *DeviceRecord // the record before binding whose load it keeps
}

// facts gathers the decision's input for one device of holder h, on a
// card as discovery read it (Card.ReadAt). Caller holds mu.
func (s *State) facts(h types.UID, device string, card *discovery.Card, port *discovery.Port, rec *ClaimRecord, superseded func(types.UID) bool) deviceFacts {
	loadedAFU, loadedSHA, loadedRef, loadedLayer := port.AFUID, "", "", ""
	seen := card.ReadAt()
	switch l, ok := s.regions.loaded[device]; {
	case !ok:
	case seen.IsZero() || seen.Before(l.at): // the pass predates the load
		loadedAFU, loadedSHA, loadedRef, loadedLayer = l.afu, l.sha256, l.reference, l.layer
	case port.AFUID == l.afu:
		loadedSHA, loadedRef, loadedLayer = l.sha256, l.reference, l.layer
	default:
		// Reset or programmed outside this driver since: the OCI cache
		// no longer keeps the file for the region.
		if s.cfg.Registry != nil {
			_ = s.cfg.Registry.Carry(device, "") // "" always parses
		}
	}
	f := deviceFacts{
		Device:         device,
		InterfaceIDs:   card.Interfaces(),
		LoadedAFU:      loadedAFU,
		LoadedSHA:      loadedSHA,
		LoadedRef:      loadedRef,
		LoadedLayer:    loadedLayer,
		Rebooted:       rec != nil && rec.BootID != s.bootID,
		Programmable:   s.cfg.Programmable,
		HaveProgrammer: s.cfg.Programmer != nil,
	}
	if rec != nil {
		i := slices.IndexFunc(rec.Devices, func(d DeviceRecord) bool { return d.Device == device })
		f.ProgrammedBefore = i >= 0 && rec.Devices[i].Programmed
		f.ProgrammedForBinding = i >= 0 && rec.Phase == PhaseProgrammed && !f.Rebooted && rec.Devices[i].AFUID == loadedAFU
	}
	if other, held := s.holds[device]; held && other != h && !superseded(other) {
		f.HeldBy, f.Releasing = s.holderName(other), s.ops.releasing[other]
	}
	return f
}
