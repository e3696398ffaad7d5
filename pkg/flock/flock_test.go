package flock_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/flock"
)

// TestMain lets the test binary hold a lock as another process: flock(2)
// locks of one process never exclude each other's open files the same way
// as another process's do, so the contender is a real child.
func TestMain(m *testing.M) {
	if path := os.Getenv("FILELOCK_HOLD"); path != "" {
		f, err := flock.Acquire(context.Background(), path, nil)
		if err != nil {
			os.Exit(2)
		}
		defer f.Close()
		os.Stdout.WriteString("held\n")
		buf := make([]byte, 1)
		_, _ = os.Stdin.Read(buf) // hold until the parent closes stdin
		return
	}
	os.Exit(m.Run())
}

func TestAnotherProcessWaitsUntilTheHolderEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.lock")
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "FILELOCK_HOLD="+path)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := stdout.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("child did not take the lock: %q %v", buf, err)
	}

	// Held elsewhere: a cancelled wait says so, and waiting was reported.
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := flock.Acquire(ctx, path, func() { close(waited) })
		done <- err
	}()
	<-waited
	cancel()
	if err := <-done; !errors.Is(err, flock.ErrHeld) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: got %v, want ErrHeld and context.Canceled", err)
	}

	// The holder ends: the waiter gets the lock.
	got := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		f, err := flock.Acquire(context.Background(), path, func() { close(waiting) })
		if err == nil {
			f.Close()
		}
		got <- err
	}()
	<-waiting
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("lock after the holder ended: %v", err)
	}
}

// TestWaiterOnAReplacedFileWaitsForTheNewHolder: while one process holds
// the lock and another waits on the same file, the lock file is deleted
// and a third process takes the lock on the new file at the path. When
// the first holder ends, the waiter must not take the lock on the file
// no longer at the path: the third still holds the lock there.
func TestWaiterOnAReplacedFileWaitsForTheNewHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.lock")
	first, err := flock.Acquire(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A bound, not a synchronisation: the waiter retries every
	// flock.Retry and must still be waiting when it ends.
	ctx, cancel := context.WithTimeout(context.Background(), 8*flock.Retry)
	defer cancel()
	waiting := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		f, err := flock.Acquire(ctx, path, func() { close(waiting) })
		if err == nil {
			f.Close()
		}
		got <- err
	}()
	<-waiting
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	third, err := flock.Acquire(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	first.Close()
	if err := <-got; !errors.Is(err, flock.ErrHeld) {
		t.Fatalf("waiter once the first holder ended, while a third holds the lock file at the path: %v, want ErrHeld", err)
	}
}
