package renumber

import (
	"slices"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Gone sorts what of granted (nodes a container may have been given)
// devices' ports do not have in devs: stale are nodes whose path or number
// another port has now (a container reaches that port, or through it, by
// them); vanished are nodes no port has (a scan that missed one, or a
// number that may come back on another port). ok is false when a port of
// devices is missing from devs (its card left out of the pass), which
// tells nothing.
func Gone(granted, devices []string, devs *discovery.Result) (stale, vanished []string, ok bool) {
	have, own := map[string]bool{}, map[string]bool{}
	for _, d := range devices {
		_, p, found := devs.FindPort(d)
		if !found {
			return nil, nil, false
		}
		for _, n := range List(Port(p)) {
			have[n] = true
			// A container reaches a device by its number: one of the
			// holder's own ports' numbers reaches nothing of another.
			own[Number(n)] = true
		}
	}
	paths, numbers := map[string]bool{}, map[string]bool{}
	for _, sig := range ByDevice(devs) {
		for _, n := range List(sig) {
			path, number := split(n)
			paths[path], numbers[number] = true, true
		}
	}
	for _, n := range granted {
		path, number := split(n)
		if have[n] || own[number] || slices.Contains(stale, n) || slices.Contains(vanished, n) {
			continue
		}
		if paths[path] || numbers[number] {
			stale = append(stale, n)
		} else {
			vanished = append(vanished, n)
		}
	}
	return stale, vanished, true
}

// Using returns, by device name, the ports of devs one of whose nodes
// has a device number has reports true for, whatever its path, with the
// last such number.
func Using(devs *discovery.Result, has func(number string) bool) map[string]string {
	out := map[string]string{}
	for device, sig := range ByDevice(devs) {
		for _, n := range List(sig) {
			if number := Number(n); has(number) {
				out[device] = number
			}
		}
	}
	return out
}
