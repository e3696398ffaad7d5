package deviceplugin_test

import (
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// BenchmarkAllocate is one Allocate over the endpoint's socket, as the
// kubelet calls it for a container, with CDI on:
//
//   - same-device: the kubelet hands the same port to the next pod; the
//     legacy hold and its CDI spec are current and kept, nothing is
//     written.
//   - new-holder: allocations alternate between {port 0} and {port 0,
//     port 1}, so every call supersedes the previous hold: the old CDI spec
//     is removed, the new one written, the checkpoint saved (fsynced) twice.
func BenchmarkAllocate(b *testing.B) {
	b.Run("same-device", func(b *testing.B) {
		n := startNode(b, nodeOptions{sim: simnode.Options{Cards: 1}, cdi: true, quiet: true})
		c := n.client(b, n.kubelet.waitRegistrations(b, 1)[intelDomain+"/"+fixtureAF0])
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := allocate(b, c, "dfl-port.0"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new-holder", func(b *testing.B) {
		n := startNode(b, nodeOptions{sim: simnode.Options{Cards: 1, PortsPerCard: 2, AFUIDs: []string{simnode.DefaultAFUID}}, cdi: true, quiet: true})
		c := n.client(b, n.kubelet.waitRegistrations(b, 1)[intelDomain+"/"+fixtureAF0])
		requests := [][]string{{"dfl-port.0"}, {"dfl-port.0", "dfl-port.1"}}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := allocate(b, c, requests[i%2]...); err != nil {
				b.Fatal(err)
			}
		}
	})
}
