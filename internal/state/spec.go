package state

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

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
			nodes[d.Device] = portNodes(p)
		}
	}
	sig, ok := nodesOf(nodes, recs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.specs.written[uid] = sig
	} else {
		delete(s.specs.written, uid)
	}
	if s.specs.devs == nil || devs.Started.After(s.specs.devs.Started) {
		s.specs.devs, s.specs.nodes = devs, nodesIn(devs)
	}
}

// portNodes describes a port's device nodes: cdi.NodeString of each,
// followed by ';'.
func portNodes(p *discovery.Port) string {
	var b strings.Builder
	for _, n := range p.Nodes() {
		b.WriteString(cdi.NodeString(n.Path, int64(n.Major), int64(n.Minor)))
		b.WriteByte(';')
	}
	return b.String()
}

// nodeList splits what nodesOf or portNodes describe into its nodes.
func nodeList(sig string) []string {
	return strings.FieldsFunc(sig, func(r rune) bool { return r == ';' || r == '|' })
}

// nodesIn is portNodes of every port of devs, by device name.
func nodesIn(devs *discovery.Result) map[string]string {
	m := map[string]string{}
	for _, c := range devs.Cards {
		for _, p := range c.Ports {
			m[p.DeviceName()] = portNodes(p)
		}
	}
	return m
}

// nodesOf describes the device nodes recs' ports have (nodes: nodesIn of
// a result); ok is false when one of them is not there (its card left
// out of the pass).
func nodesOf(nodes map[string]string, recs []DeviceRecord) (string, bool) {
	var b strings.Builder
	for _, d := range recs {
		n, ok := nodes[d.Device]
		if !ok {
			return "", false
		}
		b.WriteString(n)
		b.WriteByte('|')
	}
	return b.String(), true
}
