package state

import (
	"slices"
	"sync"
)

// portLock returns the lock that serialises programming of a device, and
// the spec writes that must not pass a programming job (lockPorts).
// Caller holds mu.
func (s *State) portLock(device string) *sync.Mutex {
	l := s.regions.locks[device]
	if l == nil {
		l = &sync.Mutex{}
		s.regions.locks[device] = l
	}
	return l
}

// lockPorts takes the port locks of recs' devices, in the order of their
// names (runJob takes one), and returns their release. Callers must not
// hold mu or a port lock.
func (s *State) lockPorts(recs []DeviceRecord) (unlock func()) {
	devices := make([]string, 0, len(recs))
	for _, d := range recs {
		devices = append(devices, d.Device)
	}
	slices.Sort(devices)
	devices = slices.Compact(devices)
	locks := make([]*sync.Mutex, len(devices))
	s.mu.Lock()
	for i, d := range devices {
		locks[i] = s.portLock(d)
	}
	s.mu.Unlock()
	for _, l := range locks {
		l.Lock()
	}
	return func() {
		for _, l := range locks {
			l.Unlock()
		}
	}
}
