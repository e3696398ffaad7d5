package state

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/internal/renumber"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// writeSpec writes the CDI spec for a holder's devices and returns the CDI
// device IDs in device order.
func (s *State) writeSpec(h Holder, recs []DeviceRecord, devs *discovery.Result) ([]string, error) {
	devices, err := specDevices(recs, devs)
	if err != nil {
		return nil, err
	}
	ids, err := s.cfg.CDI.WriteClaimSpec(string(h.UID), devices)
	if err == nil {
		s.noteWritten(h.UID, recs, devs)
	}
	return ids, err
}

// specDevices resolves a holder's device records to CDI devices.
func specDevices(recs []DeviceRecord, devs *discovery.Result) ([]cdi.Device, error) {
	devices := make([]cdi.Device, 0, len(recs))
	for _, r := range recs {
		card, port, ok := devs.FindPort(r.Device)
		if !ok {
			return nil, fmt.Errorf("device %s is not on this node any more", r.Device)
		}
		devices = append(devices, cdi.NewDevice(card, port, r.AFUID))
	}
	return devices, nil
}

// noteWritten records that uid's CDI spec was written from devs.
func (s *State) noteWritten(uid types.UID, recs []DeviceRecord, devs *discovery.Result) {
	nodes := map[string]string{}
	for _, d := range recs {
		if _, p, ok := devs.FindPort(d.Device); ok {
			nodes[d.Device] = renumber.Port(p)
		}
	}
	sig, ok := renumber.Of(nodes, deviceNames(recs))
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.specs.written[uid] = sig
	} else {
		delete(s.specs.written, uid)
	}
	if s.specs.devs == nil || devs.Started.After(s.specs.devs.Started) {
		s.specs.devs, s.specs.nodes = devs, renumber.ByDevice(devs)
	}
}

// deviceNames lists the devices of recs.
func deviceNames(recs []DeviceRecord) []string {
	names := make([]string, len(recs))
	for i, d := range recs {
		names[i] = d.Device
	}
	return names
}
