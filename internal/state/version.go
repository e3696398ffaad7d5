package state

import "k8s.io/apimachinery/pkg/types"

// Version identifies the state of a holder's hold: it changes whenever a
// prepare of the holder begins (answered from its record or not) and
// whenever one ends, and never returns to an earlier value while the
// holder has a record or an operation. It is zero until the holder's
// first prepare in this process, and again once nothing of it is left.
type Version uint64

// Version returns uid's Version. Read before the evidence a release is
// decided on, and passed to Unprepare with IfUnchanged, it keeps a
// prepare that came meanwhile from being released.
func (s *State) Version(uid types.UID) Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops.versions[uid]
}

// changed gives uid a new Version. Caller holds mu.
func (s *State) changed(uid types.UID) {
	s.ops.last++
	s.ops.versions[uid] = s.ops.last
}

// forgetVersion drops uid's Version once nothing of uid is left: no
// record, no operation, no job. Caller holds mu.
func (s *State) forgetVersion(uid types.UID) {
	if _, recorded := s.book.cp.Claims[string(uid)]; !recorded && s.ops.active[uid] == nil && !s.hasJobs(uid) {
		delete(s.ops.versions, uid)
	}
}
