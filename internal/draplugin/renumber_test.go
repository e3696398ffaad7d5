package draplugin_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestSpecFollowsRenumbering: the runtime reads a prepared claim's CDI spec
// at every container (re)start, and the kubelet does not prepare a
// prepared claim again. Once the cards were enumerated anew (each port
// took the other's name and minor) and the daemon rediscovered them, the
// claim's spec names its port's node as it is now, not the node that
// belongs to the other card's port.
func TestSpecFollowsRenumbering(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: simnode.DefaultAFUID, Programming: v1alpha1.ProgrammingNever}))
	r := pn.prepare(t, dra, c)
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	sim := pn.testNode.sim
	if err := simnode.SwapPorts(sim.Root, sim.Cards[0].Ports[0].SysfsPath, sim.Cards[1].Ports[0].SysfsPath); err != nil {
		t.Fatal(err)
	}
	pn.uevent("remove", strings.TrimPrefix(sim.Cards[0].Ports[0].SysfsPath, sim.Root+"/sys"), "dfl")
	var nodes []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		nodes, _ = cdiEdits(t, pn.CDIDir, r.Devices[0].CdiDeviceIds)
		if len(nodes) == 1 && strings.HasPrefix(nodes[0], "/dev/dfl-port.1=") {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, port, _ := pn.driver.Devices().FindPort(dev0)
	t.Fatalf("claim on %s (discovered as %s) still gets %v, the other card's port", dev0, port.Node.Name, nodes)
}

// renumberedTaints lists the devices of slices with the NoExecute taint of
// a stale device number.
func renumberedTaints(slices []resourceapi.ResourceSlice) []string {
	var out []string
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			for _, taint := range d.Taints {
				if taint.Key == driverName+"/"+deviceslice.TaintRenumbered && taint.Effect == resourceapi.DeviceTaintEffectNoExecute && taint.Value == deviceslice.TaintRenumberedValue {
					out = append(out, d.Name)
				}
			}
		}
	}
	return out
}

// TestRenumberingTaintsUntilUnprepared: a container started before the
// cards were enumerated anew keeps the device number of its port as it
// was, which is now the other card's port. Both devices are tainted
// NoExecute in the node's slices (its pod is evicted, and no claim gets
// the other port meanwhile) until the claim is unprepared.
func TestRenumberingTaintsUntilUnprepared(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: simnode.DefaultAFUID, Programming: v1alpha1.ProgrammingNever}))
	if r := pn.prepare(t, dra, c); r.Error != "" {
		t.Fatal(r.Error)
	}
	if got := renumberedTaints(pn.waitSlices(t, func([]resourceapi.ResourceSlice) bool { return true })); len(got) != 0 {
		t.Fatalf("devices %v tainted before any renumbering", got)
	}
	sim := pn.testNode.sim
	if err := simnode.SwapPorts(sim.Root, sim.Cards[0].Ports[0].SysfsPath, sim.Cards[1].Ports[0].SysfsPath); err != nil {
		t.Fatal(err)
	}
	pn.uevent("remove", strings.TrimPrefix(sim.Cards[0].Ports[0].SysfsPath, sim.Root+"/sys"), "dfl")
	pn.waitSlices(t, func(s []resourceapi.ResourceSlice) bool {
		got := renumberedTaints(s)
		slices.Sort(got)
		return slices.Equal(got, []string{dev0, dev1})
	})
	pn.unprepare(t, dra, c)
	pn.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(renumberedTaints(s)) == 0 })
}

// TestRenumberingFoundLaterIsPublished: the cards are enumerated anew
// while a claim is being programmed; the rescan's spec rewrite skips it
// (busy), and its spec is written from the devices it started with, then
// rewritten in the background once its prepare ended, which finds the
// stale numbers after the rescan's publish. The State announces them and
// the slices carry the taints without another discovery change.
func TestRenumberingFoundLaterIsPublished(t *testing.T) {
	programmed, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}, node: testnode.Options{OnStep: func(s state.Step, _ types.UID) {
		if s == state.StepProgrammed {
			once.Do(func() {
				close(programmed)
				<-release
			})
		}
	}}})
	dra := pn.draClient(t)
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU, Programming: v1alpha1.ProgrammingAlways}))
	done := make(chan *drapbv1.NodePrepareResourceResponse, 1)
	go func() { done <- pn.prepare(t, dra, c) }()
	<-programmed
	sim := pn.testNode.sim
	if err := simnode.SwapPorts(sim.Root, sim.Cards[0].Ports[0].SysfsPath, sim.Cards[1].Ports[0].SysfsPath); err != nil {
		t.Fatal(err)
	}
	pn.uevent("remove", strings.TrimPrefix(sim.Cards[0].Ports[0].SysfsPath, sim.Root+"/sys"), "dfl")
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, port, _ := pn.driver.Devices().FindPort(dev0); port != nil && port.Node.Name == "dfl-port.1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rescan never saw the cards enumerated anew")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if r := <-done; r.Error != "" {
		t.Fatal(r.Error)
	}
	pn.waitSlices(t, func(s []resourceapi.ResourceSlice) bool {
		got := renumberedTaints(s)
		slices.Sort(got)
		return slices.Equal(got, []string{dev0, dev1})
	})
}
