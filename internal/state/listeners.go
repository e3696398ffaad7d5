package state

import "sync"

// listeners are the functions Subscribe registered.
type listeners struct {
	mu   sync.Mutex
	fs   map[int]func()
	next int
}

// Subscribe makes f run whenever which devices another holder may take
// changed (a release, a failed prepare, a supersede, renumbered nodes).
// f runs without the State's lock and must return at once. cancel ends
// the subscription.
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
