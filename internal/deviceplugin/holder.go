package deviceplugin

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Legacy holders.
//
// The endpoint holds the ports of every Allocate container request in the
// shared state.State, the same record DRA claims are held in, so that a
// port held by a claim is refused here and a port held here is refused to
// a claim. The kubelet never tells a device plugin when a container ends,
// so a legacy hold is never released by an event; instead, because the
// kubelet only allocates devices it considers free, a later Allocate of any
// of its ports for the same resource supersedes it (the old holder is
// unprepared, its CDI spec removed). The kubelet tracks each resource on
// its own: after the node's mode (or a port's AFU) changed, the old
// resource's container may still run while the new resource's device looks
// free, so a hold made for another resource is never superseded (and its
// ports are advertised unhealthy), nor is a DRA claim's hold. On a node that has
// switched to DRA, where no Allocate comes, ReleaseStaleHolds releases a
// legacy hold once the kubelet's pod-resources API lists no container with
// its ports (stale.go).
//
// A legacy holder is
//
//	UID        "deviceplugin-<mode>-<DRA device name of the first port>",
//	           the first port in DRA device name order, e.g.
//	           "deviceplugin-af-fpga-0000-81-00-0-p0"
//	Namespace  "device-plugin"
//	Name       the full resource name, e.g.
//	           "fpga.intel.com/af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs"
//
// Two live legacy holders never share a UID (a port has one holder), a DRA
// claim's UID (an RFC 4122 UUID) never starts with the prefix, and the UID
// is a valid CDI claim UID, so the holder's spec file is
// "<vendor>-port_deviceplugin-...json" beside the claims' specs. Re-using
// the UID when the same device is allocated again keeps the checkpoint and
// the CDI spec unchanged on the common path.
const (
	legacyHolderPrefix = "deviceplugin-"
	// LegacyNamespace is the Namespace of every legacy holder.
	LegacyNamespace = "device-plugin"
)

// holderUID is the legacy holder of ports allocated in mode.
func holderUID(mode Mode, ports []*discovery.Port) types.UID {
	names := make([]string, len(ports))
	for i, p := range ports {
		names[i] = p.DeviceName()
	}
	return types.UID(legacyHolderPrefix + string(mode) + "-" + slices.Min(names))
}

// IsLegacyHolder reports whether uid is a holder of this endpoint rather
// than a DRA claim.
func IsLegacyHolder(uid types.UID) bool {
	return strings.HasPrefix(string(uid), legacyHolderPrefix)
}

// IsRegionHolder reports whether uid holds ports allocated in region mode:
// the only ports the programming hook may program.
func IsRegionHolder(uid types.UID) bool {
	return strings.HasPrefix(string(uid), legacyHolderPrefix+string(ModeRegion)+"-")
}

// legacyHolder is the state.Holder for ports of resource fullName.
func legacyHolder(mode Mode, fullName string, ports []*discovery.Port) state.Holder {
	return state.Holder{UID: holderUID(mode, ports), Namespace: LegacyNamespace, Name: fullName}
}

// legacyResources returns the resource each legacy holder in st was made
// for: its record's Name. A holder whose record is not written yet (an
// Allocate in flight) is left out.
func legacyResources(st *state.State) map[types.UID]string {
	out := map[types.UID]string{}
	for _, rec := range st.Records() {
		if uid := types.UID(rec.UID); IsLegacyHolder(uid) {
			out[uid] = rec.Name
		}
	}
	return out
}
