package discovery_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// startWatcher runs a watcher whose uevents come from one end of a datagram
// socketpair; the returned function sends a kernel-format uevent into it.
func startWatcher(t *testing.T, s *discovery.Scanner, interval time.Duration) (<-chan *discovery.Result, func(action, devpath, subsystem string)) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	src, err := discovery.NewUeventSourceFD(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	results := make(chan *discovery.Result, 16)
	w := &discovery.Watcher{
		Scanner:  s,
		Interval: interval,
		Events:   src,
		Settle:   time.Millisecond,
		OnChange: func(_ context.Context, res *discovery.Result) { results <- res },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	send := func(action, devpath, subsystem string) {
		msg := fmt.Sprintf("%s@%s\x00ACTION=%s\x00DEVPATH=%s\x00SUBSYSTEM=%s\x00SEQNUM=7\x00", action, devpath, action, devpath, subsystem)
		if _, err := unix.Write(fds[1], []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	return results, send
}

func next(t *testing.T, results <-chan *discovery.Result) *discovery.Result {
	t.Helper()
	select {
	case res := <-results:
		return res
	case <-time.After(10 * time.Second):
		t.Fatal("no discovery result within 10s")
		return nil
	}
}

func devpath(n *simnode.Node, p string) string {
	return strings.TrimPrefix(p, n.Root+"/sys")
}

func TestWatcherHotplug(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1})
	results, send := startWatcher(t, &discovery.Scanner{Root: n.Root}, time.Hour)
	if res := next(t, results); len(res.Cards) != 1 {
		t.Fatalf("initial scan: %d cards, want 1", len(res.Cards))
	}
	c, err := n.AddCard()
	if err != nil {
		t.Fatal(err)
	}
	// An irrelevant event first: it must not trigger anything on its own.
	send("add", "/devices/virtual/net/veth0", "net")
	send("add", devpath(n, c.Ports[0].SysfsPath), "dfl")
	res := next(t, results)
	if len(res.Cards) != 2 || res.Cards[1].PCIAddress != c.PCIAddress {
		t.Fatalf("after hot-plug: %d cards, want 2 with %s", len(res.Cards), c.PCIAddress)
	}
	if err := n.RemoveCard(n.Cards[0]); err != nil {
		t.Fatal(err)
	}
	send("remove", devpath(n, n.Cards[0].PCIPath), "pci")
	send("remove", devpath(n, n.Cards[0].FMEPath), "dfl")
	res = next(t, results)
	if len(res.Cards) != 1 || res.Cards[0].PCIAddress != c.PCIAddress {
		t.Fatalf("after hot-unplug: %d cards, want only %s", len(res.Cards), c.PCIAddress)
	}
}

func TestWatcherPeriodicRefresh(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverOPAE, Cards: 2, PortsPerCard: 1})
	results, _ := startWatcher(t, &discovery.Scanner{Root: n.Root}, 5*time.Millisecond)
	next(t, results)
	const afu = "00112233445566778899aabbccddeeff"
	if err := n.SetAFUID(n.Cards[1].Ports[0], afu); err != nil {
		t.Fatal(err)
	}
	res := next(t, results)
	if got := res.Cards[1].Ports[0].AFUID; got != afu {
		t.Fatalf("AFU ID after refresh %q, want %q", got, afu)
	}
}

// TestWatcherFindsCardOnceStuckReadReturns: a card whose read is stuck in
// the first pass is left out; once that read returns the watcher finds it,
// although it only refreshes (a uevent source is there) and a refresh
// never looks for new cards.
func TestWatcherFindsCardOnceStuckReadReturns(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1})
	stuck := filepath.Join(n.Cards[1].Ports[0].SysfsPath, "afu_id")
	release := wedge(t, stuck)
	results, _ := startWatcher(t, &discovery.Scanner{Root: n.Root, ReadTimeout: 50 * time.Millisecond}, 5*time.Millisecond)
	first := next(t, results)
	if len(first.Cards) != 1 || len(first.Errors) != 1 || !strings.Contains(first.Errors[0].Error(), "read of "+resolved(t, stuck)+" timed out") {
		t.Fatalf("first pass with card 1 stuck: %d cards, errors %v; want card 0 and card 1's timed-out read", len(first.Cards), first.Errors)
	}
	release()
	res := next(t, results)
	if len(res.Cards) != 2 || len(res.Errors) != 0 || !portHealth(t, res, 1).Healthy {
		t.Fatalf("after the stuck read returned: %d cards, errors %v; want both cards, healthy", len(res.Cards), res.Errors)
	}
}

// TestRescanOnReturn: a stuck read that returns makes the watcher rescan
// at once only when a card was left out for it, and at most once an
// interval; a card kept as an earlier pass read it waits for the periodic
// pass, so a card whose every read outlasts the timeout is not rescanned
// back to back.
func TestRescanOnReturn(t *testing.T) {
	const interval = 30 * time.Second
	now := time.Now()
	leftOut := &discovery.Result{Errors: []error{discovery.TimedOut("0000:02:00.0", "afu_id", time.Second)}}
	kept := &discovery.Result{Cards: []*discovery.Card{{PCIAddress: "0000:02:00.0"}}, Errors: []error{errors.New("card 0000:03:00.0: no interface ID")}}
	for _, tc := range []struct {
		name string
		cur  *discovery.Result
		last time.Time
		want bool
	}{
		{"card left out, first return", leftOut, time.Time{}, true},
		{"card left out, rescanned an interval ago", leftOut, now.Add(-interval), true},
		{"card left out, rescanned just now", leftOut, now.Add(-time.Second), false},
		{"card kept from an earlier pass", kept, time.Time{}, false},
		{"no result yet", nil, time.Time{}, false},
	} {
		if got := discovery.RescanOnReturn(tc.cur, tc.last, now, interval); got != tc.want {
			t.Errorf("%s: rescan %v, want %v", tc.name, got, tc.want)
		}
	}
}
