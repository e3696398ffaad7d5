package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memory is a checkpoint changed in memory, generation by generation, as
// the State changes it; latest is what a flush writes.
type memory struct {
	mu      sync.Mutex
	cp      *Checkpoint
	gen     uint64
	flushes atomic.Int32
	// hold stops the first flush, once it took its snapshot, until it
	// is closed; holding is closed then.
	hold    chan struct{}
	holding chan struct{}
}

func (m *memory) change(i int) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cp.Claims[claimN(i).UID] = claimN(i)
	m.gen++
	return m.gen
}

func (m *memory) latest() (*Checkpoint, uint64) {
	m.mu.Lock()
	cp, gen := m.cp.Clone(), m.gen
	m.mu.Unlock()
	if m.flushes.Add(1) == 1 {
		close(m.holding)
		<-m.hold
	}
	return cp, gen
}

func openStore(t *testing.T) (*Store, *memory, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	s, cp, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &memory{cp: cp, hold: make(chan struct{}), holding: make(chan struct{})}, path
}

// awaitWaiting returns once n savers wait for the flush in flight.
func awaitWaiting(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; runtime.Gosched() {
		s.mu.Lock()
		w := s.waiting
		s.mu.Unlock()
		if w == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d savers wait for the flush, want %d", w, n)
		}
	}
}

// TestSaversShareTheNextFlush: savers whose changes come while a flush
// runs are not answered by it (it missed their changes), and all share
// the one flush after it.
func TestSaversShareTheNextFlush(t *testing.T) {
	s, m, path := openStore(t)
	const followers = 5
	errs := make(chan error, followers+1)
	go func() { errs <- s.Save(m.change(0), m.latest) }()
	<-m.holding
	var done atomic.Int32
	for i := 1; i <= followers; i++ {
		gen := m.change(i) // after the first flush's snapshot
		go func() {
			err := s.Save(gen, m.latest)
			if m.flushes.Load() < 2 {
				err = errors.New("answered before the flush that carries its change")
			}
			done.Add(1)
			errs <- err
		}()
	}
	awaitWaiting(t, s, followers)
	close(m.hold)
	for range followers + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Syncs(); got != 2 {
		t.Errorf("%d flushes for a flush and the savers waiting for it, want 2", got)
	}
	b, _ := os.ReadFile(path)
	if cp, err := Read(b); err != nil || len(cp.Claims) != followers+1 {
		t.Fatalf("on the disk: %v, %d claims, want %d", err, len(cp.Claims), followers+1)
	}
}

// TestFailedFlushIsNotDurable: a flush that fails answers with its error,
// and a saver after it flushes again rather than trusting the failed one.
func TestFailedFlushIsNotDurable(t *testing.T) {
	s, m, path := openStore(t)
	close(m.hold)
	if err := s.Save(m.change(1), m.latest); err != nil {
		t.Fatal(err)
	}
	s.file.f.Close() // the disk goes bad
	gen := m.change(2)
	if err := s.Save(gen, m.latest); err == nil {
		t.Fatal("a failed flush was answered")
	}
	if err := s.file.reopen(); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(gen, m.latest); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if cp, err := Read(b); err != nil || len(cp.Claims) != 2 {
		t.Fatalf("on the disk: %v, %d claims, want 2", err, len(cp.Claims))
	}
}

// TestStopWaitsAndRefuses: Stop waits for the flush in flight (while its
// context lasts), and no flush starts after it.
func TestStopWaitsAndRefuses(t *testing.T) {
	s, m, _ := openStore(t)
	first := make(chan error, 1)
	go func() { first <- s.Save(m.change(1), m.latest) }()
	<-m.holding
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Stop(ended); err == nil {
		t.Fatal("Stop returned while a flush runs and its context has ended")
	}
	close(m.hold)
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := s.Save(1, m.latest); err != nil {
		t.Fatalf("a change on the disk already: %v", err)
	}
	if err := s.Save(m.change(2), m.latest); !errors.Is(err, ErrStopped) {
		t.Fatalf("save after Stop: %v, want ErrStopped", err)
	}
}
