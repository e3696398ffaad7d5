package draplugin_test

import (
	"context"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
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
