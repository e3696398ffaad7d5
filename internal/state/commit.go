package state

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
)

// Checkpoint records, as the State hands them out.
type (
	ClaimRecord  = checkpoint.ClaimRecord
	DeviceRecord = checkpoint.DeviceRecord
	ClaimPhase   = checkpoint.ClaimPhase
)

// Phases of a record (see checkpoint.ClaimPhase).
const (
	PhaseStarted    = checkpoint.PhaseStarted
	PhaseCompleted  = checkpoint.PhaseCompleted
	PhaseProgrammed = checkpoint.PhaseProgrammed
)

// book is the checkpoint in memory (update) and on the disk (sync).
type book struct {
	store   *checkpoint.Store // replaced only by tests; guarded by State.mu
	cp      *checkpoint.Checkpoint
	gen     uint64 // counts changes of cp
	damaged string // why the checkpoint was damaged at start, if it was
}

// update is the one place the checkpoint changes: it applies change in
// memory and returns the generation sync must make durable. Caller holds
// mu; change must keep every device of a record held by its holder.
func (s *State) update(change func(cp *checkpoint.Checkpoint)) uint64 {
	change(s.book.cp)
	s.book.gen++
	return s.book.gen
}

// sync returns once generation gen is on the disk. Callers must not hold
// mu.
func (s *State) sync(gen uint64) error {
	s.mu.Lock()
	store := s.book.store
	s.mu.Unlock()
	err := store.Save(gen, s.latest)
	if errors.Is(err, checkpoint.ErrStopped) {
		return fmt.Errorf("%w: %w", ErrDraining, err)
	}
	return err
}

// latest is the checkpoint a flush writes, and its generation.
func (s *State) latest() (*checkpoint.Checkpoint, uint64) {
	if s.hooks.onFlush != nil {
		s.hooks.onFlush()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.cp.Clone(), s.book.gen
}

// commit applies change and makes it durable: update, then sync.
func (s *State) commit(change func(cp *checkpoint.Checkpoint)) error {
	s.mu.Lock()
	gen := s.update(change)
	s.mu.Unlock()
	return s.sync(gen)
}

// durable returns once every change made so far is on the disk: an
// answer drawn from memory waits for it. Callers must not hold mu.
func (s *State) durable() error {
	s.mu.Lock()
	gen := s.book.gen
	s.mu.Unlock()
	return s.sync(gen)
}

// CheckpointSyncs counts the checkpoint's flushes since New.
func (s *State) CheckpointSyncs() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.store.Syncs()
}

// record is a holder's record for its plans in the given phase.
func (s *State) record(h Holder, phase ClaimPhase, plans []*plan) *ClaimRecord {
	return &ClaimRecord{UID: string(h.UID), Namespace: h.Namespace, Name: h.Name, Phase: phase, BootID: s.bootID, Devices: s.recordDevices(plans)}
}

// recordDevices is the checkpoint's account of what the plans decided and
// what their finished jobs loaded.
func (s *State) recordDevices(plans []*plan) []DeviceRecord {
	recs := make([]DeviceRecord, len(plans))
	for i, p := range plans {
		recs[i] = DeviceRecord{Device: p.req.Device, Requests: p.req.Requests, AFUID: p.AFU, Programmed: p.Program,
			Bitstream: p.Bitstream, SHA256: p.SHA256, LayerDigest: p.Layer}
		if b := p.before; b != nil {
			recs[i].Programmed, recs[i].Bitstream, recs[i].SHA256, recs[i].LayerDigest = b.Programmed, b.Bitstream, b.SHA256, b.LayerDigest
		}
		if j := p.job; j != nil {
			select {
			case <-j.done:
				if j.result.Err == nil {
					recs[i].Bitstream, recs[i].SHA256, recs[i].LayerDigest = j.result.Bitstream, j.result.SHA256, j.result.LayerDigest
				}
			default:
			}
		}
	}
	return recs
}

// undoRecords returns a change that puts back the records of uids as they
// are now, with their holds. Caller holds mu.
func (s *State) undoRecords(uids []types.UID) func(*checkpoint.Checkpoint) {
	prev := map[types.UID]*ClaimRecord{}
	for _, uid := range uids {
		if rec := s.book.cp.Claims[string(uid)]; rec != nil {
			prev[uid] = rec.Clone()
		}
	}
	return func(cp *checkpoint.Checkpoint) {
		for _, uid := range uids {
			s.dropRecord(uid)
		}
		for uid, rec := range prev {
			cp.Claims[string(uid)] = rec
			for _, d := range rec.Devices {
				s.holds[d.Device] = uid
			}
		}
	}
}

// reholdFromRecords gives every device reserved for uid back to the
// record that holds it, or frees it. Caller holds mu.
func (s *State) reholdFromRecords(uid types.UID) {
	owner := map[string]types.UID{}
	for other, rec := range s.book.cp.Claims {
		for _, d := range rec.Devices {
			owner[d.Device] = types.UID(other)
		}
	}
	for device, h := range s.holds {
		if h != uid {
			continue
		}
		if o, ok := owner[device]; ok {
			s.holds[device] = o
		} else {
			delete(s.holds, device)
		}
	}
}

// dropRecord removes a holder's record and frees the devices it held.
// Caller holds mu, within an update.
func (s *State) dropRecord(uid types.UID) {
	rec := s.book.cp.Claims[string(uid)]
	if rec == nil {
		return
	}
	for _, d := range rec.Devices {
		if s.holds[d.Device] == uid {
			delete(s.holds, d.Device)
		}
	}
	delete(s.book.cp.Claims, string(uid))
	delete(s.specs.vanished, uid)
}

// putRecord adds rec to the checkpoint, its devices held by its holder.
// Caller holds mu, within an update.
func (s *State) putRecord(rec *ClaimRecord) {
	s.book.cp.Claims[rec.UID] = rec
	for _, d := range rec.Devices {
		s.holds[d.Device] = types.UID(rec.UID)
	}
}
