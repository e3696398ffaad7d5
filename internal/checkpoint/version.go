package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Payload versions. A checkpoint is written in the lowest version that
// carries each of its records, so that the release before reads every
// checkpoint it can read whole and refuses the others untouched
// (ErrNewer) instead of taking what it does not know for damage:
//
//	2  {"version":2,"bootID":…,"claims":{…}} with started and completed
//	   records: what the release before Programmed records reads
//	3  adds Programmed records and a record's renumbered nodes
//
// Version 1, an envelope with a checksum of its own, was written only
// during development and is read as damage.
const (
	Version     = 3
	baseVersion = 2
)

var (
	// ErrCorrupt marks a checkpoint file that was damaged: a slot failed
	// its checksum, could not be decoded, or was missing.
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrNewer marks a checkpoint written by a newer driver.
	ErrNewer = errors.New("checkpoint written by a newer driver")
)

// version is the first payload version that carries rec.
func (c *ClaimRecord) version() int {
	if c.Phase == PhaseProgrammed || len(c.Renumbered) > 0 {
		return 3
	}
	return baseVersion
}

// Encode renders a checkpoint payload in the lowest version that carries
// every record of cp.
func Encode(cp *Checkpoint) ([]byte, error) {
	out := *cp
	out.Version = baseVersion
	for _, rec := range cp.Claims {
		out.Version = max(out.Version, rec.version())
	}
	data, err := json.Marshal(&out)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return data, nil
}

// Decode parses a checkpoint payload. It fails with an error wrapping
// ErrNewer for a later version than Version and ErrCorrupt for anything
// undecodable. A payload that decodes but holds a device twice is
// returned sanitized together with an error wrapping ErrCorrupt.
func Decode(b []byte) (*Checkpoint, error) {
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	switch {
	case v.Version > Version:
		return nil, fmt.Errorf("%w: format version %d, this driver reads versions up to %d: upgrade the driver on this node to the release that wrote it or a newer one, or drain the node and move the file aside",
			ErrNewer, v.Version, Version)
	case v.Version < baseVersion:
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, v.Version)
	}
	cp := &Checkpoint{}
	if err := strictDecode(b, cp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if cp.Claims == nil {
		cp.Claims = map[string]*ClaimRecord{}
	}
	if err := cp.validate(); err != nil {
		return cp.sanitized(), fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return cp, nil
}

// strictDecode decodes one JSON object into v, refusing unknown fields
// and trailing data.
func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
