// Package renumber compares the device nodes a CDI spec gave a container
// with the nodes discovery shows now, to find nodes whose device number
// another port took when the node's cards were enumerated anew.
package renumber

import (
	"strings"

	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Port describes a port's device nodes: cdi.NodeString of each, followed
// by ';'.
func Port(p *discovery.Port) string {
	var b strings.Builder
	for _, n := range p.Nodes() {
		b.WriteString(cdi.NodeString(n.Path, int64(n.Major), int64(n.Minor)))
		b.WriteByte(';')
	}
	return b.String()
}

// ByDevice is Port of every port of devs, by device name.
func ByDevice(devs *discovery.Result) map[string]string {
	m := map[string]string{}
	for _, c := range devs.Cards {
		for _, p := range c.Ports {
			m[p.DeviceName()] = Port(p)
		}
	}
	return m
}

// Of describes the device nodes of devices (nodes: ByDevice of a result);
// ok is false when one of them is not there (its card left out of the
// pass).
func Of(nodes map[string]string, devices []string) (string, bool) {
	var b strings.Builder
	for _, d := range devices {
		n, ok := nodes[d]
		if !ok {
			return "", false
		}
		b.WriteString(n)
		b.WriteByte('|')
	}
	return b.String(), true
}

// List splits what Of or Port describe into its nodes.
func List(sig string) []string {
	return strings.FieldsFunc(sig, func(r rune) bool { return r == ';' || r == '|' })
}

// Number is the device number ("major:minor") of a node described by
// cdi.NodeString.
func Number(node string) string {
	_, number := split(node)
	return number
}

// split splits a node described by cdi.NodeString into its path and its
// device number.
func split(node string) (path, number string) {
	i := strings.LastIndexByte(node, ' ')
	return node[:max(i, 0)], node[i+1:]
}
