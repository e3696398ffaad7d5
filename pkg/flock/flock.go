// Package flock takes exclusive locks on files that hold between
// processes (flock(2)): one process at a time uses what the file guards,
// and the kernel releases the lock when that process ends, however it
// ends.
package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Retry is how often Acquire tries again while another process holds the
// lock. flock(2) cannot wait and be cancelled at once; a holder releases
// when it stops, so a quarter second is well below anything it waits for.
const Retry = 250 * time.Millisecond

// ErrHeld is returned, wrapped with the context's error, when ctx ends
// while another process still holds the lock.
var ErrHeld = errors.New("held by another process")

// Acquire creates path if needed and takes an exclusive lock on it,
// waiting while another process holds it until ctx ends. waiting, when
// set, is called once, when Acquire first finds the lock held. Closing the
// returned file releases the lock.
func Acquire(ctx context.Context, path string, waiting func()) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	notified := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			// The file may have left the path while this waited on
			// it (deleted or replaced): another process may hold the
			// lock on the one there now.
			same, serr := atPath(f, path)
			switch {
			case serr != nil:
				f.Close()
				return nil, fmt.Errorf("lock %s: %w", path, serr)
			case same:
				return f, nil
			}
			f.Close()
			if f, err = os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600); err != nil {
				return nil, fmt.Errorf("open lock file: %w", err)
			}
			continue
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !notified && waiting != nil {
			waiting()
		}
		notified = true
		t := time.NewTimer(Retry)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("lock %s: %w: %w", path, ErrHeld, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// atPath reports whether f is the file at path.
func atPath(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	cur, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(held, cur), nil
}
