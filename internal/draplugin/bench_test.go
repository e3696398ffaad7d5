package draplugin_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

func prepareOnce(b *testing.B, dra drapbv1.DRAPluginClient, c *resourceapi.ResourceClaim) {
	resp, err := dra.NodePrepareResources(context.Background(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(c)}})
	if err != nil {
		b.Fatal(err)
	}
	if r := resp.Claims[string(c.UID)]; r.Error != "" {
		b.Fatal(r.Error)
	}
}

func unprepareAll(b *testing.B, dra drapbv1.DRAPluginClient, claims []*resourceapi.ResourceClaim) {
	req := &drapbv1.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, protoClaim(c))
	}
	if _, err := dra.NodeUnprepareResources(context.Background(), req); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPrepare is one claim for an already-loaded AFU (no programming)
// over the kubelet's gRPC socket: the helper's claim read from the API
// server, the hold, the CDI spec and the checkpoint, both fsynced.
func BenchmarkPrepare(b *testing.B) {
	pn := startPreparingNode(b, preparingOptions{sim: simnode.Options{Cards: 1}})
	dra := pn.draClient(b)
	claims := make([]*resourceapi.ResourceClaim, b.N)
	for i := range claims {
		claims[i] = pn.claim(b, []string{dev0}, fpgaConfig(b, v1alpha1.FpgaConfig{AFUID: simnode.DefaultAFUID}))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		prepareOnce(b, dra, claims[i])
		b.StopTimer()
		unprepareAll(b, dra, claims[i:i+1])
		b.StartTimer()
	}
}

// simPRTime is how long the simulated partial reconfiguration takes in the
// concurrency benchmarks: real regions take about a second or more, which is
// why claims must not queue behind each other.
const simPRTime = 500 * time.Millisecond

// benchmarkConcurrent prepares one claim on each of n regions at once, every
// claim reprogramming its region (programming: Always, simulated programmer
// taking simPRTime). The figure to compare is ns/op against n=1.
func benchmarkConcurrent(b *testing.B, n int) {
	pn := startPreparingNode(b, preparingOptions{sim: simnode.Options{Cards: n}, programmer: &program.SimProgrammer{Delay: simPRTime}})
	dra := pn.draClient(b)
	devices := pn.driver.Devices().Ports()
	cfg := fpgaConfig(b, v1alpha1.FpgaConfig{AFUID: NewAFU, Programming: v1alpha1.ProgrammingAlways})
	rounds := make([][]*resourceapi.ResourceClaim, b.N)
	for i := range rounds {
		for _, d := range devices {
			rounds[i] = append(rounds[i], pn.claim(b, []string{d.DeviceName()}, cfg))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for _, c := range rounds[i] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				prepareOnce(b, dra, c)
			}()
		}
		wg.Wait()
		b.StopTimer()
		unprepareAll(b, dra, rounds[i])
		b.StartTimer()
	}
	b.ReportMetric(float64(n), "claims/op")
}

func BenchmarkPrepareConcurrent1(b *testing.B)  { benchmarkConcurrent(b, 1) }
func BenchmarkPrepareConcurrent64(b *testing.B) { benchmarkConcurrent(b, 64) }

// durableNode is the node of benchmarkDurablePrepare: its claims, a
// phase's worth per element, and what its prepares measured.
type durableNode struct {
	pn        *preparingNode
	dra       drapbv1.DRAPluginClient
	claims    [][]*resourceapi.ResourceClaim
	latencies []time.Duration
	syncs     uint64
}

// phase prepares the claims of phase p, workers goroutines at once, each
// on its own regions one after another, then unprepares them with the
// timer stopped.
func (n *durableNode) phase(b *testing.B, p, workers int) {
	perWorker := len(n.claims[p]) / workers
	before := n.pn.state.CheckpointSyncs()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		mine := n.claims[p][w*perWorker : (w+1)*perWorker]
		wg.Go(func() {
			for _, c := range mine {
				start := time.Now()
				prepareOnce(b, n.dra, c)
				d := time.Since(start)
				mu.Lock()
				n.latencies = append(n.latencies, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	n.syncs += n.pn.state.CheckpointSyncs() - before
	b.StopTimer()
	unprepareAll(b, n.dra, n.claims[p])
	b.StartTimer()
}

// p50 is the median of n's prepare latencies.
func (n *durableNode) p50() time.Duration {
	slices.Sort(n.latencies)
	return n.latencies[len(n.latencies)/2]
}

// benchmarkDurablePrepare prepares claims through the kubelet's socket
// (no programming: the AFU is loaded), workers goroutines at once, each on
// its own regions one after another, perWorker claims each (1: bursts of
// workers claims at once; more: a steady stream). Between phases the
// claims are unprepared with the timer stopped. The simulated tree is on a
// tmpfs, as sysfs and /dev are on a node, and the disk is synced before
// the timer starts: the disk carries only what the node writes. It reports
// the checkpoint flushes per prepare and the median prepare latency.
// metadata turns device metadata on, as the daemon ships.
func benchmarkDurablePrepare(b *testing.B, workers, perWorker int, metadata bool) {
	pn := startPreparingNode(b, preparingOptions{sim: simnode.Options{Cards: workers * perWorker}, node: testnode.Options{SimInMemory: true}, deviceMetadata: metadata})
	n := &durableNode{pn: pn, dra: pn.draClient(b)}
	phases := (b.N + workers*perWorker - 1) / (workers * perWorker)
	devices := pn.driver.Devices().Ports()
	n.claims = make([][]*resourceapi.ResourceClaim, phases)
	for p := range n.claims {
		for _, d := range devices {
			n.claims[p] = append(n.claims[p], pn.claim(b, []string{d.DeviceName()}))
		}
	}
	// What the build and the set-up left for the disk to write back
	// would otherwise be written during the phases, slowing the flushes.
	unix.Sync()
	b.ReportAllocs()
	b.ResetTimer()
	for p := range phases {
		n.phase(b, p, workers)
	}
	b.StopTimer()
	b.ReportMetric(float64(n.syncs)/float64(len(n.latencies)), "syncs/prepare")
	b.ReportMetric(float64(n.p50().Microseconds()), "p50-µs")
}

// BenchmarkDurablePrepare: flushes per prepare and median latency at
// concurrency 1 and 8; without device metadata, and with it (the daemon's
// default) at concurrency 1. An op is one prepare.
func BenchmarkDurablePrepare(b *testing.B) {
	for _, load := range []struct {
		name               string
		workers, perWorker int
		metadata           bool
	}{
		{"concurrency-1", 1, 8, false},
		{"concurrency-8/bursts", 8, 1, false},
		{"concurrency-8/steady", 8, 8, false},
		{"concurrency-1/metadata", 1, 8, true},
	} {
		b.Run(load.name, func(b *testing.B) { benchmarkDurablePrepare(b, load.workers, load.perWorker, load.metadata) })
	}
}
