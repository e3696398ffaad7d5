package state

import "sync"

// listeners are the functions Subscribe registered.
type listeners struct {
	mu   sync.Mutex
	fs   map[int]func()
	next int
}

// Subscribe makes f run whenever a holder was released, a failed prepare
// gave up devices it had reserved, a prepare superseded other holders, or
// stale device numbers were noted for a holder: which devices another
// holder may take changed (the legacy endpoint advertises such devices
// healthy or not). f runs without the State's lock, in the goroutine that
// made the change: it must return at once. The returned function ends the
// subscription.
func (s *State) Subscribe(f func()) (cancel func()) {
	l := &s.listeners
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fs == nil {
		l.fs = map[int]func(){}
	}
	id := l.next
	l.next++
	l.fs[id] = f
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.fs, id)
	}
}

// notify runs the Subscribe listeners. Callers must not hold mu.
func (s *State) notify() {
	l := &s.listeners
	l.mu.Lock()
	fs := make([]func(), 0, len(l.fs))
	for _, f := range l.fs {
		fs = append(fs, f)
	}
	l.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
