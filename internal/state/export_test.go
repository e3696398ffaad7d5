package state

import (
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// withJournal runs f on s's journal while no flush runs.
func withJournal(s *State, f func(j *journal)) {
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	f(&s.journal)
}

// SetGather makes s's flushes take flushTime on average as far as
// gathering is concerned, wait at most bound, and call onGather when one
// starts waiting; it forgets the previous flush.
func SetGather(s *State, flushTime, bound time.Duration, onGather func()) {
	withJournal(s, func(j *journal) {
		j.flushTime, j.maxGather, j.onGather, j.lastBatch, j.lastCalls = flushTime, bound, onGather, 0, 0
	})
}

// SetGatherBound makes s's flushes wait at most bound.
func SetGatherBound(s *State, bound time.Duration) {
	withJournal(s, func(j *journal) { j.maxGather = bound })
}

// SetStreamGap makes a stream of calls last while the next flush comes
// less than gap after the previous one.
func SetStreamGap(s *State, gap time.Duration) {
	withJournal(s, func(j *journal) { j.streamGap = gap })
}

// AgeLastFlush makes the previous flush of s look d older.
func AgeLastFlush(s *State, d time.Duration) {
	withJournal(s, func(j *journal) { j.lastEnd = j.lastEnd.Add(-d) })
}

// SetOnFlush makes s's flushes call f when they start writing.
func SetOnFlush(s *State, f func()) {
	withJournal(s, func(j *journal) { j.onFlush = f })
}

// Waiting is how many callers wait for s's checkpoint to reach the disk.
func Waiting(s *State) int32 { return s.journal.waiting() }

// BreakCheckpointWrites makes s's checkpoint writes fail (a disk gone bad)
// until HealCheckpointWrites.
func BreakCheckpointWrites(s *State) {
	withJournal(s, func(j *journal) {
		j.file.closeAIO(errors.New("writes broken by the test"))
		j.file.f.Close()
	})
}

// HealCheckpointWrites makes s's checkpoint writes work again.
func HealCheckpointWrites(s *State) error {
	var err error
	withJournal(s, func(j *journal) { err = j.file.reopen() })
	return err
}

// SetOnCompleted makes s call f as it begins to answer a completed holder
// or to rewrite its spec (completed), before it looks at the record. Set
// it before s is used.
func SetOnCompleted(s *State, f func(types.UID)) { s.onCompleted = f }

// SetOnAwaitJob makes s call f as a prepare starts waiting for a
// programming job of the holder's outside its operation (the hook's). Set
// it before s is used.
func SetOnAwaitJob(s *State, f func(types.UID)) { s.onAwaitJob = f }
