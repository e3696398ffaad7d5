package draplugin_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// TestRacingClaimsOverTheSocket: two claims for one device prepared at
// the same time through the kubelet's socket, round after round: exactly
// one gets the device, the other is refused naming it.
func TestRacingClaimsOverTheSocket(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 1}})
	dra := pn.draClient(t)
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	for range rounds {
		claims := []*resourceapi.ResourceClaim{pn.claim(t, []string{dev0}), pn.claim(t, []string{dev0})}
		results := make([]*drapbv1.NodePrepareResourceResponse, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range claims {
			wg.Go(func() {
				<-start
				results[i] = pn.prepare(t, dra, c)
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for i, r := range results {
			if r.Error == "" {
				if won >= 0 {
					t.Fatalf("both %s and %s prepared %s", claims[0].Name, claims[1].Name, dev0)
				}
				won = i
			}
		}
		if won < 0 {
			t.Fatalf("neither claim was prepared: %q / %q", results[0].Error, results[1].Error)
		}
		if lost := results[1-won].Error; !strings.Contains(lost, "default/"+claims[won].Name) {
			t.Fatalf("the losing claim's error %q does not name the holder %s", lost, claims[won].Name)
		}
		pn.unprepare(t, dra, claims[won])
	}
}

// TestUnprepareDuringProgrammingOverTheSocket: the kubelet's unprepare of
// a claim whose programming runs answers "still releasing" and the region
// stays held; another claim is refused until the programming ended and
// the retried unprepare went through.
func TestUnprepareDuringProgrammingOverTheSocket(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 1}, programmer: sim, prepareWait: time.Millisecond,
		node: testnode.Options{Backend: testnode.Stubborn{SimProgrammer: sim}, ReleaseWait: time.Millisecond}})
	dra := pn.draClient(t)
	a := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU, Programming: v1alpha1.ProgrammingAlways}))
	b := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: simnode.SecondAFUID, Programming: v1alpha1.ProgrammingAlways}))
	if r := pn.prepare(t, dra, a); !strings.Contains(r.Error, "programming in progress") {
		t.Fatalf("prepare of a: %q, want in progress", r.Error)
	}
	<-started
	resp, err := dra.NodeUnprepareResources(context.Background(), &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(a)}})
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.Claims[string(a.UID)].Error; !strings.Contains(e, "still releasing") || !strings.Contains(e, dev0) {
		t.Fatalf("unprepare while a's programming runs: %q, want still releasing, naming %s", e, dev0)
	}
	if r := pn.prepare(t, dra, b); !strings.Contains(r.Error, "being released") || !strings.Contains(r.Error, a.Name) {
		t.Fatalf("prepare of b while a is released: %q, want it refused naming a", r.Error)
	}
	close(gate)
	for {
		resp, err := dra.NodeUnprepareResources(context.Background(), &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(a)}})
		if err != nil {
			t.Fatal(err)
		}
		e := resp.Claims[string(a.UID)].Error
		if e == "" {
			break
		}
		if !strings.Contains(e, "still releasing") {
			t.Fatalf("retried unprepare: %q", e)
		}
	}
	for {
		r := pn.prepare(t, dra, b)
		if r.Error == "" {
			break
		}
		if !strings.Contains(r.Error, "programming in progress") {
			t.Fatalf("prepare of b once a was released: %q", r.Error)
		}
	}
	if o := sim.Overlaps(); o != 0 {
		t.Fatal("the region was programmed twice at once")
	}
}
