package program

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// failSafe is how long a test waits for a Load that must end on its own
// before declaring it hung. It is no synchronisation: a correct Load ends
// long before, an unbounded one never does.
const failSafe = 20 * time.Second

// wedgingProgrammer programs like the SimProgrammer, then, the first time
// only, replaces the port's AFU ID attribute with a FIFO: opening it for
// reading blocks until a writer comes, as a read of a wedged device does.
// It closes fifo (when set) once the FIFO is in place.
type wedgingProgrammer struct {
	SimProgrammer
	wedged bool
	fifo   chan struct{}
}

func (w *wedgingProgrammer) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	if err := w.SimProgrammer.Program(ctx, card, port, payload); err != nil || w.wedged {
		return err
	}
	w.wedged = true
	path := port.AFUIDPath()
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("wedge %s: %w", path, err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		return fmt.Errorf("wedge %s: %w", path, err)
	}
	if w.fifo != nil {
		close(w.fifo)
	}
	return nil
}

// stuckCards is a DFL card (afu_id) and an XRT card (xclbinuuid) whose
// AFU ID attribute a wedgingProgrammer wedges, with a bitstream for each.
func stuckCards(t *testing.T) map[string]struct {
	card *discovery.Card
	bs   *Bitstream
} {
	return map[string]struct {
		card *discovery.Card
		bs   *Bitstream
	}{
		"afu_id":     {testCard(t, testIf, 1, testAFU2), openTestBitstream(t, gbsFile(t, testIf, testAFU, 64))},
		"xclbinuuid": {xrtTestCard(t, testXIf, testXclbin2), openTestBitstream(t, xclbinFile(t, testXIf, testXclbin, 64))},
	}
}

// loadAsync runs Load on a goroutine of its own and returns its error on
// the channel.
func loadAsync(ctx context.Context, p Programmer, card *discovery.Card, bs *Bitstream, opts LoadOptions) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := Load(ctx, p, card, card.Ports[0], bs, opts)
		done <- err
	}()
	return done
}

func await(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(failSafe):
		t.Fatalf("Load still running %s after programming: a read of the AFU ID attribute is not bounded", failSafe)
		return nil
	}
}

// TestLoadStuckReadTimesOut: when the AFU ID attribute's read blocks
// after programming, Load ends after the read timeout with an error
// naming the attribute, the port and the timeout; while that read stays
// stuck, another Load fails at once without reading (however long its
// read timeout), and once it returns the port loads again.
func TestLoadStuckReadTimesOut(t *testing.T) {
	for attr, tc := range stuckCards(t) {
		t.Run(attr, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			port := tc.card.Ports[0]
			prog := &wedgingProgrammer{}
			const bound = 50 * time.Millisecond
			start := time.Now()
			err := await(t, loadAsync(ctx, prog, tc.card, tc.bs, LoadOptions{ReadTimeout: bound, VerifyTimeout: time.Hour}))
			wantErr(t, err, "read of "+attr+" of port "+port.DeviceName()+" timed out after "+bound.String(), "is unknown")
			if !errors.Is(err, ErrVerifyFailed) || !errors.Is(err, discovery.ErrReadTimedOut) {
				t.Fatalf("error %q does not match ErrVerifyFailed and discovery.ErrReadTimedOut", err)
			}
			if took := time.Since(start); took < bound {
				t.Fatalf("Load gave up after %s, before the read timeout %s", took, bound)
			}

			// The read is still stuck: a second Load (whose programmer
			// leaves the FIFO in place) does not start another one, so it
			// does not wait for its (hour-long) bound.
			noop := programmerFunc(func(context.Context, *discovery.Card, *discovery.Port, []byte) error { return nil })
			err = await(t, loadAsync(ctx, noop, tc.card, tc.bs, LoadOptions{ReadTimeout: time.Hour, VerifyTimeout: time.Hour}))
			wantErr(t, err, "read of "+attr+" of port "+port.DeviceName()+" timed out", "an earlier read has been stuck since")
			if !errors.Is(err, discovery.ErrReadTimedOut) {
				t.Fatalf("error %q does not match discovery.ErrReadTimedOut", err)
			}

			// The stuck read returns once a writer comes (the reader is
			// there, so a non-blocking open succeeds); the port then loads
			// again, once the returned read has cleared its mark.
			w, err := os.OpenFile(port.AFUIDPath(), os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				t.Fatalf("open the FIFO for writing: %v (no read is waiting on it)", err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(failSafe)
			for {
				_, err := Load(ctx, prog, tc.card, port, tc.bs, LoadOptions{ReadTimeout: time.Hour})
				if err == nil {
					break
				}
				if !errors.Is(err, discovery.ErrReadTimedOut) || time.Now().After(deadline) {
					t.Fatalf("Load after the stuck read returned: %v", err)
				}
				runtime.Gosched()
			}
		})
	}
}

// TestLoadStuckReadEndsWithItsContext: a Load whose verification read is
// stuck ends once its context does, however long the read timeout.
func TestLoadStuckReadEndsWithItsContext(t *testing.T) {
	for attr, tc := range stuckCards(t) {
		t.Run(attr, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			path := tc.card.Ports[0].AFUIDPath()
			prog := &wedgingProgrammer{fifo: make(chan struct{})}
			done := loadAsync(ctx, prog, tc.card, tc.bs, LoadOptions{ReadTimeout: time.Hour, VerifyTimeout: time.Hour})
			select {
			case <-prog.fifo:
			case err := <-done:
				t.Fatalf("Load ended before the attribute was wedged: %v", err)
			}
			// The verification reached the FIFO once a writer's open
			// returns; the read then blocks until the writer closes.
			opened := make(chan *os.File, 1)
			go func() {
				w, err := os.OpenFile(path, os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
				}
				opened <- w
			}()
			select {
			case w := <-opened:
				if w == nil {
					return
				}
				defer w.Close()
			case err := <-done:
				// Let the writer's open return.
				if r, rerr := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); rerr == nil {
					defer r.Close()
				}
				t.Fatalf("Load ended before its verification read the FIFO: %v", err)
			}
			cancel()
			err := await(t, done)
			wantErr(t, err, "gave up reading "+attr)
			// Stopped by its caller: no fault of the device.
			if errors.Is(err, ErrVerifyFailed) || !errors.Is(err, context.Canceled) {
				t.Fatalf("error %q matches ErrVerifyFailed or not context.Canceled", err)
			}
		})
	}
}
