package program

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// simAFUIDLen is the length of the AFU ID that starts a simulated payload.
const simAFUIDLen = 16

// SimPayload returns a payload for SimProgrammer, following the simulated
// payload convention: the 16 bytes of afuID (the canonical hex decoded, in
// order), then filler, size bytes in all rounded up to a multiple of 4 and to
// at least 16. The simulated node's sample bitstreams carry such payloads,
// so loading one sets the port's afu_id to the AFU ID in its metadata.
func SimPayload(afuID string, size int) ([]byte, error) {
	id, err := discovery.CanonicalID(afuID)
	if err != nil {
		return nil, fmt.Errorf("AFU ID: %w", err)
	}
	size = (max(size, simAFUIDLen) + 3) &^ 3
	b := make([]byte, size)
	_, _ = hex.Decode(b[:simAFUIDLen], []byte(id)) // id is 32 hex digits
	for i := simAFUIDLen; i < size; i++ {
		b[i] = byte(i)
	}
	return b, nil
}

// SimProgrammer simulates programming on a simulated node.
//
// For an Intel card it validates the arguments the kernel validates (port
// id below the card's PortsNum, a non-empty payload whose length is a
// multiple of 4; failures wrap syscall.EINVAL), waits Delay and Gate, then
// writes the AFU ID that starts the payload (see SimPayload) into the port's
// afu_id file, in the kernel's "%016llx%016llx\n" format.
//
// For an XRT card (card.Driver is discovery.DriverXRT) the payload is a
// whole xclbin: it must parse, and its interface UUID must be the card's, as
// xocl checks (failures wrap syscall.EINVAL); after Delay and Gate the
// xclbin's UUID is written into port.AFUIDPath() (xclbinuuid) dashed, as
// xocl prints it.
//
// Either file is replaced atomically: a temporary file in the same
// directory renamed over it. A regular file cannot report EBUSY, so it shows
// the old ID until the new one replaces it at the end.
//
// Unlike the kernel backends it does not serialise ports of one FME: it
// records what callers do, so tests can check that distinct ports were
// programmed in parallel (MaxConcurrent) and one port never twice at once
// (Overlaps).
//
// Set the exported fields before the first Program; the methods are safe for
// concurrent use. The zero value is ready to use.
type SimProgrammer struct {
	// Delay is how long each programming takes; ctx cancels the wait.
	Delay time.Duration
	// Delays overrides Delay for the AFU IDs (xclbin UUIDs) it names, in
	// canonical form (32 lowercase hex digits): a slow bitstream.
	Delays map[string]time.Duration
	// FailDevices names ports (by DeviceName) on which every programming
	// fails after its delay, as on a card whose partial reconfiguration
	// fails.
	FailDevices []string
	// Gate, when not nil, holds each Program, after OnStart and Delay,
	// until it receives a value from Gate or Gate is closed; ctx cancels the
	// wait. Tests use it instead of timing.
	Gate <-chan struct{}
	// OnStart, when not nil, is called by each Program whose arguments are
	// valid, once the call counts as in progress and before Delay and Gate.
	OnStart func(card *discovery.Card, port *discovery.Port)

	mu        sync.Mutex
	failNext  []error
	failPorts map[string]error
	calls     map[string]int
	active    map[string]int
	inFlight  int
	maxFlight int
	overlaps  int
	total     int
}

// Name returns "sim".
func (s *SimProgrammer) Name() string { return KindSim }

// FailNext makes the next Program call that gets past argument validation
// fail with err (wrapped in ErrProgramFailed) instead of writing afu_id.
// Calls queue up: FailNext twice fails the next two programmings.
func (s *SimProgrammer) FailNext(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, err)
}

// FailPort makes every programming of port fail with err until FailPort is
// called again with a nil err.
func (s *SimProgrammer) FailPort(port *discovery.Port, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPorts == nil {
		s.failPorts = map[string]error{}
	}
	if err == nil {
		delete(s.failPorts, simKey(port))
		return
	}
	s.failPorts[simKey(port)] = err
}

// Calls returns how many times Program was called for port, including
// refused and failed calls.
func (s *SimProgrammer) Calls(port *discovery.Port) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[simKey(port)]
}

// TotalCalls returns how many times Program was called.
func (s *SimProgrammer) TotalCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// MaxConcurrent returns the largest number of programmings (with valid
// arguments) that were in progress at once.
func (s *SimProgrammer) MaxConcurrent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxFlight
}

// Overlaps returns how many programmings started on a port that was
// already being programmed: a caller bug, always 0 for a correct caller.
func (s *SimProgrammer) Overlaps() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overlaps
}

// simKey identifies a port by its sysfs directory, where afu_id lives.
func simKey(port *discovery.Port) string { return port.Node.SysfsPath }

// Program simulates programming payload into the region behind port.
func (s *SimProgrammer) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	if card == nil || port == nil {
		return fmt.Errorf("%w: card and port are required", ErrProgramFailed)
	}
	key := simKey(port)
	s.mu.Lock()
	s.total++
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[key]++
	s.mu.Unlock()

	content, err := simLoaded(card, port, payload)
	if err != nil {
		return err
	}

	s.begin(key)
	defer s.end(key)
	if s.OnStart != nil {
		s.OnStart(card, port)
	}
	if delay := s.delay(content); delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: simulated programming of port %s: %w", ErrProgramFailed, port.Node.Name, ctx.Err())
		case <-t.C:
		}
	}
	if s.Gate != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: simulated programming of port %s: %w", ErrProgramFailed, port.Node.Name, ctx.Err())
		case <-s.Gate:
		}
	}
	if slices.Contains(s.FailDevices, port.DeviceName()) {
		return fmt.Errorf("%w: simulated partial-reconfiguration error on port %s: the port is set to fail (--sim-program-fail)", ErrProgramFailed, port.Node.Name)
	}
	if err := s.failure(key); err != nil {
		return fmt.Errorf("%w: simulated partial-reconfiguration error on port %s: %w", ErrProgramFailed, port.Node.Name, err)
	}
	if err := writeSysfsFile(port.AFUIDPath(), content); err != nil {
		return fmt.Errorf("%w: simulated programming of port %s: %w", ErrProgramFailed, port.Node.Name, err)
	}
	return nil
}

// delay is how long loading the AFU whose AFU ID attribute reads loaded
// takes.
func (s *SimProgrammer) delay(loaded string) time.Duration {
	if id, err := discovery.CanonicalID(loaded); err == nil {
		if d, ok := s.Delays[id]; ok {
			return d
		}
	}
	return s.Delay
}

// ParseSimDelays parses "AFUID=DURATION,..." (the --sim-program-delays
// flag) into SimProgrammer.Delays.
func ParseSimDelays(spec string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		id, dur, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("simulated programming delay %q: want AFUID=DURATION, e.g. %s=90s", item, strings.Repeat("0", 32))
		}
		canon, err := discovery.CanonicalID(id)
		if err != nil {
			return nil, fmt.Errorf("simulated programming delay %q: AFU ID: %w", item, err)
		}
		d, err := time.ParseDuration(dur)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("simulated programming delay %q: %q is not a duration such as 90s", item, dur)
		}
		out[canon] = d
	}
	return out, nil
}

// simLoaded validates a simulated programming's arguments and returns what
// the port's AFU ID attribute shows once payload is loaded.
func simLoaded(card *discovery.Card, port *discovery.Port, payload []byte) (string, error) {
	if card.Driver == discovery.DriverXRT {
		h, err := parseXclbin("simulated xclbin payload", bytes.NewReader(payload), int64(len(payload)))
		switch {
		case err != nil:
			return "", fmt.Errorf("%w: simulated xocl on %s: %w: %w", ErrProgramFailed, card.PCIAddress, err, syscall.EINVAL)
		case !card.Accepts(h.interfaceID):
			return "", fmt.Errorf("%w: simulated xocl on %s: xclbin interface UUID %s is not one of the card's (%s): %w", ErrProgramFailed, card.PCIAddress, h.interfaceID, InterfacesOf(card.Interfaces()), syscall.EINVAL)
		}
		return dashedUUID(h.uuid) + "\n", nil
	}
	switch {
	case port.ID < 0 || port.ID >= card.PortsNum:
		return "", fmt.Errorf("%w: simulated FME %s: port_id %d is not below ports_num %d: %w", ErrProgramFailed, card.FME.Name, port.ID, card.PortsNum, syscall.EINVAL)
	case len(payload) == 0 || len(payload)%4 != 0:
		return "", fmt.Errorf("%w: simulated FME %s: buffer_size %d is not a positive multiple of 4: %w", ErrProgramFailed, card.FME.Name, len(payload), syscall.EINVAL)
	case len(payload) < simAFUIDLen:
		return "", fmt.Errorf("%w: simulated FME %s: payload of %d bytes is shorter than the %d-byte AFU ID a simulated payload starts with (see SimPayload): %w", ErrProgramFailed, card.FME.Name, len(payload), simAFUIDLen, syscall.EINVAL)
	}
	return fmt.Sprintf("%016x%016x\n", binary.BigEndian.Uint64(payload[:8]), binary.BigEndian.Uint64(payload[8:16])), nil
}

func (s *SimProgrammer) begin(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		s.active = map[string]int{}
	}
	s.active[key]++
	if s.active[key] > 1 {
		s.overlaps++
	}
	s.inFlight++
	s.maxFlight = max(s.maxFlight, s.inFlight)
}

func (s *SimProgrammer) end(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active[key]--
	s.inFlight--
}

// failure returns the error a FailNext or FailPort asked for, if any.
func (s *SimProgrammer) failure(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failNext) > 0 {
		err := s.failNext[0]
		s.failNext = s.failNext[1:]
		return err
	}
	return s.failPorts[key]
}

// writeSysfsFile replaces the simulated sysfs attribute at path with
// content, atomically. It does not fsync: a simulated sysfs need not survive
// a crash.
func writeSysfsFile(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// simPayloadSize is the size of the simulated bitstreams' payloads.
const simPayloadSize = 64 << 10

// WriteSimRepository installs into the repository directory dir one GBS
// per AFU for interfaceID whose payload follows the SimProgrammer
// convention, so the simulated programmer can load any of them. It returns
// the installed files.
func WriteSimRepository(dir, interfaceID string, afuIDs []string) ([]string, error) {
	return installSim(dir, afuIDs, func(w io.Writer, afu string) error {
		payload, err := SimPayload(afu, simPayloadSize)
		if err != nil {
			return err
		}
		return WriteGBS(w, NewGBSMetadata(interfaceID, afu, "sim_"+afu[:min(8, len(afu))]), payload)
	})
}

// WriteSimXclbinRepository installs into the repository directory dir one
// xclbin per UUID in xclbinUUIDs, built for the shell with interfaceID and
// the platform VBNV platform (partial-reconfiguration mode, a 64 KiB
// BITSTREAM section), so the simulated programmer can load any of them on a
// simulated XRT card. It returns the installed files
// (<dir>/<interfaceID>/<xclbinUUID>.xclbin).
func WriteSimXclbinRepository(dir, interfaceID, platform string, xclbinUUIDs []string) ([]string, error) {
	return installSim(dir, xclbinUUIDs, func(w io.Writer, uuid string) error {
		payload, err := SimPayload(uuid, simPayloadSize)
		if err != nil {
			return err
		}
		return WriteXclbin(w, XclbinMetadata{InterfaceID: interfaceID, XclbinUUID: uuid, Platform: platform, Mode: XclbinPR}, payload)
	})
}

// installSim writes one bitstream per ID with write and installs it into
// the repository dir.
func installSim(dir string, ids []string, write func(w io.Writer, id string) error) ([]string, error) {
	tmp, err := os.MkdirTemp("", "fpga-sim-bitstreams-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var paths []string
	for i, id := range ids {
		var b bytes.Buffer
		if err := write(&b, id); err != nil {
			return nil, err
		}
		src := filepath.Join(tmp, strconv.Itoa(i))
		if err := os.WriteFile(src, b.Bytes(), 0o644); err != nil {
			return nil, err
		}
		bs, err := Install(dir, src, true)
		if err != nil {
			return nil, err
		}
		paths = append(paths, bs.Path)
	}
	return paths, nil
}
