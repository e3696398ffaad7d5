package deviceplugin

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/fpga-dra/fpga-dra-driver/internal/extresource"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// device is one device-plugin device: a port in af mode, a card with all
// of its ports in region mode. Its ID is the kernel name the Intel plugin
// used: the port node ("dfl-port.0") or the card's name (its management
// node, "dfl-fme.0": discovery.Card.Name). That node only names the
// device: a container gets the port nodes, never a management node.
type device struct {
	id    string
	card  *discovery.Card
	ports []*discovery.Port
	// healthy and reason combine the ports' health and holds.
	healthy bool
	reason  string
}

// afDeviceID and regionDeviceID are the IDs the kubelet knows devices by
// (see device).
func afDeviceID(p *discovery.Port) string     { return p.Node.Name }
func regionDeviceID(c *discovery.Card) string { return c.Name() }

// resource is one extended resource (the full name, with its domain) and
// its devices, in discovery order.
type resource struct {
	name    string
	devices []*device
}

// inventory groups a discovery result into resources. A card whose vendor's
// plugin named it (discovery.Legacy, e.g. amd.com/<VBNV>-<timestamp>) is
// one device of that resource whatever the mode; other cards get the Intel
// plugin's names in domain, by mode. A port held by a DRA claim (from
// before the node switched modes) or by a legacy holder made for another
// resource (a container allocated before the mode or the port's AFU
// changed), or one a running container may reach by a stale device number
// (see holds), is advertised unhealthy, so the kubelet does not hand it
// out twice. Ports
// that cannot be named (no readable or an all-f AFU ID in af mode) are
// left out and reported.
func inventory(res *discovery.Result, mode Mode, domain string, h holds) (map[string]*resource, []error) {
	out := map[string]*resource{}
	var errs []error
	add := func(name string, d *device) {
		if !strings.Contains(name, "/") {
			name = domain + "/" + name
		}
		r := out[name]
		if r == nil {
			r = &resource{name: name}
			out[name] = r
		}
		d.healthy, d.reason = health(name, d.id, d.ports, h)
		r.devices = append(r.devices, d)
	}
	for _, c := range res.Cards {
		switch {
		case len(c.Ports) == 0:
			continue
		case c.Legacy.Resource != "":
			add(c.Legacy.Resource, &device{id: c.Legacy.DeviceID, card: c, ports: c.Ports})
			continue
		}
		if mode == ModeRegion {
			name, err := extresource.RegionName(c.InterfaceID)
			if err != nil {
				errs = append(errs, fmt.Errorf("card %s: %w", c.PCIAddress, err))
				continue
			}
			add(name, &device{id: regionDeviceID(c), card: c, ports: c.Ports})
			continue
		}
		for _, p := range c.Ports {
			if p.AFUID == "" || p.AFUID == discovery.AllF {
				errs = append(errs, fmt.Errorf("port %s on card %s has no usable AFU ID (%s): it is in no af resource until it is reprogrammed", p.Node.Name, c.PCIAddress, p.Health))
				continue
			}
			name, err := extresource.AFName(c.InterfaceID, p.AFUID)
			if err != nil {
				errs = append(errs, fmt.Errorf("port %s on card %s: %w", p.Node.Name, c.PCIAddress, err))
				continue
			}
			add(name, &device{id: afDeviceID(p), card: c, ports: []*discovery.Port{p}})
		}
	}
	return out, errs
}

// holds is what a device's availability depends on besides its ports'
// health: who holds each port, the resource each legacy holder was made
// for (its record's Name; a holder whose record is not written yet, an
// Allocate in flight, is left out), the kubelet IDs each legacy holder's
// record names, and the ports a running container may reach by a device
// number it was given before the cards were enumerated anew
// (state.RenumberedDevices), each with that container's holder.
type holds struct {
	holders    map[string]types.UID
	resources  map[types.UID]string
	ids        map[types.UID][]string
	renumbered map[string]state.Holder
}

// currentHolds reads holds from st for the ports of devs.
func currentHolds(st *state.State, devs *discovery.Result) holds {
	h := holds{holders: st.Holders(), resources: map[types.UID]string{}, ids: map[types.UID][]string{}}
	for _, rec := range st.Records() {
		uid := types.UID(rec.UID)
		if !IsLegacyHolder(uid) {
			continue
		}
		h.resources[uid] = rec.Name
		for _, d := range rec.Devices {
			h.ids[uid] = append(h.ids[uid], d.Requests...)
		}
	}
	if devs != nil {
		h.renumbered = st.RenumberedDevices(devs)
	}
	return h
}

// reachedByStaleNumber returns the holder whose running container may
// reach port by a device number given before the cards were enumerated
// anew, when the kubelet's own accounting does not keep the port from
// other containers: the port is not that holder's own (an Allocate of it
// under another ID is refused as re-enumerated, see sameKubeletIDs), and
// it is not under the holder's resource with one of the IDs the holder
// was allocated as (the kubelet counts those as the running container's
// until it ends, and hands one out again only then, which releases the
// hold: releaseReissued).
func (h holds) reachedByStaleNumber(resource, id, port string) (state.Holder, bool) {
	rh, ok := h.renumbered[port]
	if !ok || h.holders[port] == rh.UID {
		return state.Holder{}, false
	}
	if r, legacy := h.resources[rh.UID]; legacy && r == resource && slices.Contains(h.ids[rh.UID], id) {
		return state.Holder{}, false
	}
	return rh, true
}

// health is healthy when every port is healthy, held by no DRA claim and
// no legacy holder of a resource other than name (see inventory), and
// reached by no running container through a stale device number
// (reachedByStaleNumber) of the device id.
func health(name, id string, ports []*discovery.Port, h holds) (bool, string) {
	var reasons []string
	for _, p := range ports {
		if !p.Health.Healthy {
			reasons = append(reasons, p.Node.Name+": "+p.Health.String())
		}
		holder, held := h.holders[p.DeviceName()]
		resource, legacy := h.resources[holder]
		switch {
		case !held:
		case !IsLegacyHolder(holder):
			reasons = append(reasons, fmt.Sprintf("%s: held by DRA claim %s", p.Node.Name, holder))
		case legacy && resource != name:
			reasons = append(reasons, fmt.Sprintf("%s: held by device-plugin holder %s for resource %s, whose container may still run", p.Node.Name, holder, resource))
		}
		if rh, ok := h.reachedByStaleNumber(name, id, p.DeviceName()); ok {
			reasons = append(reasons, fmt.Sprintf("%s: a running container of %s may reach it by a device number it was given before the cards were enumerated anew", p.Node.Name, rh))
		}
	}
	return len(reasons) == 0, strings.Join(reasons, "; ")
}

// api is the device as ListAndWatch reports it, with the card's NUMA node
// for the kubelet's topology manager.
func (d *device) api() *pluginapi.Device {
	out := &pluginapi.Device{ID: d.id, Health: pluginapi.Healthy}
	if !d.healthy {
		out.Health = pluginapi.Unhealthy
	}
	if d.card.NUMANode >= 0 {
		out.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.card.NUMANode)}}}
	}
	return out
}
