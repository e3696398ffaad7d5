package state

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
)

// SetOnFlush makes s's flushes call f as they take the checkpoint they
// write. Set it before s is used.
func SetOnFlush(s *State, f func()) { s.hooks.onFlush = f }

// BreakCheckpointWrites makes s's checkpoint writes fail (a disk gone bad)
// until HealCheckpointWrites.
func BreakCheckpointWrites(s *State) {
	s.mu.Lock()
	store := s.book.store
	s.mu.Unlock()
	store.Close()
}

// HealCheckpointWrites makes s's checkpoint writes work again.
func HealCheckpointWrites(s *State) error {
	store, _, err := checkpoint.Open(s.cfg.CheckpointPath)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.book.store = store
	return nil
}

// SetOnCompleted makes s call f as it begins to answer a completed holder
// or to rewrite its spec (completed), before it looks at the record. Set
// it before s is used.
func SetOnCompleted(s *State, f func(types.UID)) { s.hooks.onCompleted = f }

// SetOnAwaitJob makes s call f as a prepare starts waiting for a
// programming job of the holder's outside its operation (the hook's). Set
// it before s is used.
func SetOnAwaitJob(s *State, f func(types.UID)) { s.hooks.onAwaitJob = f }
