package draplugin_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

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

// benchmarkDurablePrepare has workers goroutines prepare claims through
// the kubelet's socket, each on its own regions one after another (no
// programming: the AFU is loaded), perWorker claims a phase (1: bursts of
// workers claims at once; more: a steady stream); between phases the
// claims are unprepared with the timer stopped. It reports the
// checkpoint flushes per prepare (counted where the checkpoint is
// written) and the median prepare latency. skipSync writes the checkpoint
// without flushing it: the baseline. metadata turns device metadata on, as
// the daemon ships: the helper then writes (and flushes) each claim's
// metadata file.
func benchmarkDurablePrepare(b *testing.B, workers, perWorker int, skipSync, metadata bool) {
	pn := startPreparingNode(b, preparingOptions{sim: simnode.Options{Cards: workers * perWorker}, node: testnode.Options{SkipSync: skipSync}, deviceMetadata: metadata})
	dra := pn.draClient(b)
	devices := pn.driver.Devices().Ports()
	phases := (b.N + len(devices) - 1) / len(devices)
	claims := make([][]*resourceapi.ResourceClaim, phases)
	for p := range claims {
		for _, d := range devices {
			claims[p] = append(claims[p], pn.claim(b, []string{d.DeviceName()}))
		}
	}
	latencies := make([]time.Duration, 0, phases*len(devices))
	var mu sync.Mutex
	var syncs uint64
	b.ReportAllocs()
	b.ResetTimer()
	for p := range phases {
		before := pn.state.CheckpointSyncs()
		var wg sync.WaitGroup
		for w := range workers {
			mine := claims[p][w*perWorker : (w+1)*perWorker]
			wg.Go(func() {
				for _, c := range mine {
					start := time.Now()
					prepareOnce(b, dra, c)
					d := time.Since(start)
					mu.Lock()
					latencies = append(latencies, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		syncs += pn.state.CheckpointSyncs() - before
		b.StopTimer()
		unprepareAll(b, dra, claims[p])
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(syncs)/float64(len(latencies)), "syncs/prepare")
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
}

// BenchmarkDurablePrepare: flushes per prepare and median latency at
// concurrency 1 and 8, with the checkpoint flushed and, as the baseline,
// not flushed; without device metadata, and with it (the daemon's
// default) at concurrency 1.
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
		for _, skip := range []bool{false, true} {
			name := load.name + "/sync"
			if skip {
				name = load.name + "/nosync"
			}
			b.Run(name, func(b *testing.B) { benchmarkDurablePrepare(b, load.workers, load.perWorker, skip, load.metadata) })
		}
	}
}
