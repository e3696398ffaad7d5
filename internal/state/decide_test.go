package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// The interface ID, AFUs and digest the decision tables use.
const (
	ifID = "69528db6eb31577a8c3668f9faa081f6"
	afuA = "d8424dc4a4a3c413f89e433683f9040b"
	afuB = "f7df405cbd7acf7222f144b0b93acd18"
	shaX = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
)

// TestDecideDevice is the decision policy as a table: programming mode x
// what is loaded x digest pin x reboot x programmed before binding x
// programmable x held.
func TestDecideDevice(t *testing.T) {
	const (
		shaY  = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
		other = "default/other (uid-2)"
		ref   = "registry.example.com/fpga/accel@sha256:3333333333333333333333333333333333333333333333333333333333333333"
	)
	cfg := func(mode v1alpha1.ProgrammingPolicy, sha string) *v1alpha1.FpgaConfig {
		return &v1alpha1.FpgaConfig{AFUID: afuA, InterfaceID: ifID, Programming: mode, SHA256: sha}
	}
	free := deviceFacts{Device: "fpga-0000-01-00-0-p0", InterfaceIDs: []string{ifID}, Programmable: true, HaveProgrammer: true}
	with := func(f func(*deviceFacts)) deviceFacts {
		d := free
		f(&d)
		return d
	}
	for _, tc := range []struct {
		name    string
		cfg     *v1alpha1.FpgaConfig
		facts   deviceFacts
		program bool
		afu     string
		err     error
	}{
		{name: "no config: handed over as loaded", facts: with(func(f *deviceFacts) { f.LoadedAFU = afuB }), afu: afuB},
		{name: "no config on a forbidding node: still handed over", facts: with(func(f *deviceFacts) { f.LoadedAFU = afuB; f.Programmable = false }), afu: afuB},
		{name: "held by another holder", cfg: cfg(v1alpha1.ProgrammingNever, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.HeldBy = other }), err: ErrDeviceHeld},
		{name: "held by a holder being released", facts: with(func(f *deviceFacts) { f.HeldBy = other; f.Releasing = true }), err: ErrDeviceHeld},
		{name: "interface mismatch", cfg: &v1alpha1.FpgaConfig{AFUID: afuA, InterfaceID: "11111111111111111111111111111111"}, facts: free, err: program.ErrInterfaceMismatch},
		{name: "second interface of the region", cfg: &v1alpha1.FpgaConfig{AFUID: afuA, InterfaceID: "11111111111111111111111111111111", Programming: v1alpha1.ProgrammingIfNeeded}, facts: with(func(f *deviceFacts) { f.InterfaceIDs = []string{ifID, "11111111111111111111111111111111"} }), program: true, afu: afuA},

		{name: "Never, loaded", cfg: cfg(v1alpha1.ProgrammingNever, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA }), afu: afuA},
		{name: "Never, other AFU loaded", cfg: cfg(v1alpha1.ProgrammingNever, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuB }), err: ErrAFUNotLoaded},
		{name: "Never, nothing readable", cfg: cfg(v1alpha1.ProgrammingNever, ""), facts: free, err: ErrAFUNotLoaded},
		{name: "Never, loaded, after a reboot", cfg: cfg(v1alpha1.ProgrammingNever, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.Rebooted = true; f.ProgrammedBefore = true }), afu: afuA},
		{name: "Never, loaded, node forbids programming", cfg: cfg(v1alpha1.ProgrammingNever, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.Programmable = false }), afu: afuA},

		{name: "Always, loaded", cfg: cfg(v1alpha1.ProgrammingAlways, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA }), program: true, afu: afuA},
		{name: "Always, other loaded", cfg: cfg(v1alpha1.ProgrammingAlways, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuB }), program: true, afu: afuA},
		{name: "Always, node forbids programming", cfg: cfg(v1alpha1.ProgrammingAlways, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.Programmable = false }), err: ErrNotProgrammable},
		{name: "Always, no programmer", cfg: cfg(v1alpha1.ProgrammingAlways, ""), facts: with(func(f *deviceFacts) { f.HaveProgrammer = false }), err: ErrNotProgrammable},

		{name: "IfNeeded, loaded", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA }), afu: afuA},
		{name: "IfNeeded, other loaded", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuB }), program: true, afu: afuA},
		{name: "IfNeeded, nothing readable", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: free, program: true, afu: afuA},
		{name: "IfNeeded, loaded, pinned digest this driver loaded", cfg: cfg(v1alpha1.ProgrammingIfNeeded, shaX), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.LoadedSHA = shaX }), afu: afuA},
		{name: "IfNeeded, loaded, pinned digest loaded from elsewhere", cfg: cfg(v1alpha1.ProgrammingIfNeeded, shaX), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA }), program: true, afu: afuA},
		{name: "IfNeeded, loaded, another digest loaded", cfg: cfg(v1alpha1.ProgrammingIfNeeded, shaX), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.LoadedSHA = shaY }), program: true, afu: afuA},
		{name: "IfNeeded, loaded, OCI reference this driver loaded", cfg: &v1alpha1.FpgaConfig{AFUID: afuA, BitstreamRef: ref, Programming: v1alpha1.ProgrammingIfNeeded},
			facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.LoadedRef = ref }), afu: afuA},
		{name: "IfNeeded, loaded, OCI reference loaded from elsewhere", cfg: &v1alpha1.FpgaConfig{AFUID: afuA, BitstreamRef: ref, Programming: v1alpha1.ProgrammingIfNeeded},
			facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA }), program: true, afu: afuA},
		{name: "IfNeeded, loaded, rebooted since this driver programmed it", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.Rebooted = true; f.ProgrammedBefore = true }), program: true, afu: afuA},
		{name: "IfNeeded, loaded, rebooted, found loaded before", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.Rebooted = true }), afu: afuA},
		{name: "IfNeeded, other loaded, node forbids programming", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuB; f.Programmable = false }), err: ErrNotProgrammable},
		{name: "IfNeeded, loaded, node forbids programming", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.Programmable = false }), afu: afuA},
		{name: "IfNeeded, rebooted, node forbids programming", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: with(func(f *deviceFacts) {
			f.LoadedAFU = afuA
			f.Rebooted = true
			f.ProgrammedBefore = true
			f.Programmable = false
		}), err: ErrNotProgrammable},

		{name: "Always, programmed for the holder before binding", cfg: cfg(v1alpha1.ProgrammingAlways, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.ProgrammedForBinding = true }), afu: afuA},
		{name: "IfNeeded, programmed before binding from the pinned file", cfg: cfg(v1alpha1.ProgrammingIfNeeded, shaX), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.ProgrammedForBinding = true }), afu: afuA},
		{name: "programmed before binding, node forbids programming since", cfg: cfg(v1alpha1.ProgrammingAlways, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.ProgrammedForBinding = true; f.Programmable = false }), afu: afuA},
		{name: "programmed before binding, another AFU loaded since", cfg: cfg(v1alpha1.ProgrammingIfNeeded, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuB; f.ProgrammedForBinding = true }), program: true, afu: afuA},
		{name: "programmed before binding, interface mismatch still refused", cfg: &v1alpha1.FpgaConfig{AFUID: afuA, InterfaceID: "11111111111111111111111111111111"}, facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.ProgrammedForBinding = true }), err: program.ErrInterfaceMismatch},
		{name: "programmed before binding, held by another holder", cfg: cfg(v1alpha1.ProgrammingAlways, ""), facts: with(func(f *deviceFacts) { f.LoadedAFU = afuA; f.ProgrammedForBinding = true; f.HeldBy = other }), err: ErrDeviceHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideDevice(tc.cfg, tc.facts)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				if err.Error() == tc.err.Error() {
					t.Fatalf("error %q names no device, value or fix", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Program != tc.program || got.AFU != tc.afu {
				t.Fatalf("plan %+v, want program=%v afu=%s", got, tc.program, tc.afu)
			}
		})
	}
}

// TestDecideDeviceHeldNamesHolder: a refusal names the holder, and says
// when it is being released.
func TestDecideDeviceHeldNamesHolder(t *testing.T) {
	for _, releasing := range []bool{false, true} {
		_, err := decideDevice(nil, deviceFacts{Device: "fpga-0000-01-00-0-p0", HeldBy: "ns/a (uid-1)", Releasing: releasing})
		want := "prepared for ns/a (uid-1)"
		if releasing {
			want = "being released (a programming job for it is still running) for ns/a (uid-1)"
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "fpga-0000-01-00-0-p0") {
			t.Fatalf("releasing=%v: %v, want it to say %q", releasing, err, want)
		}
	}
}

// TestDecideDeviceProduct is the decision policy over the whole cross
// product of programming mode x what is loaded x digest pin (and the file
// this driver loaded) x reboot (and what the record says was programmed)
// x programmed before binding x programmable x held: 864 combinations.
// OCI references, interface mismatches, a missing programmer and no
// config are TestDecideDevice's named rows. The expected outcome
// of each combination is the first of policy's rules whose fields all
// match (a field left empty matches every value); the rules are the
// policy as decideDevice's documentation states it.
func TestDecideDeviceProduct(t *testing.T) {
	n := 0
	for _, mode := range []string{"Never", "Always", "IfNeeded"} {
		for _, load := range []string{"none", "same", "other"} {
			for _, pin := range []string{"unpinned", "unpinned-loaded-here", "pinned-loaded-here", "pinned-loaded-elsewhere"} {
				for _, boot := range []string{"same-boot", "same-boot-programmed-before", "rebooted-erased", "rebooted-found-loaded"} {
					for _, binding := range []string{"after-binding", "before-binding"} {
						if binding == "before-binding" && boot != "same-boot" && boot != "same-boot-programmed-before" {
							continue // a reboot ends what was programmed before binding
						}
						for _, programmable := range []string{"programmable", "forbidden"} {
							for _, held := range []string{"free", "held"} {
								c := decideCombo{mode, load, pin, boot, binding, programmable, held}
								cfg, f := c.input()
								want := expectDecision(t, c)
								name := strings.Join([]string{mode, load, pin, boot, binding, programmable, held}, "/")
								t.Run(name, func(t *testing.T) { checkDecision(t, cfg, f, want) })
								n++
							}
						}
					}
				}
			}
		}
	}
	if n != 3*3*4*(4+2)*2*2 {
		t.Fatalf("%d combinations, want the whole product", n)
	}
}

// decideCombo is one combination of TestDecideDeviceProduct, a value per
// dimension; in a rule of decidePolicy, an empty field matches every value.
type decideCombo struct {
	mode, loaded, pin, boot, binding, programmable, held string
}

// decideOutcome is what decideDevice must do: program, keep, or fail with
// err.
type decideOutcome struct {
	program bool
	err     error
}

// decideKeep keeps what the device holds; decideProgram programs it.
var decideKeep, decideProgram = decideOutcome{}, decideOutcome{program: true}

// decidePolicy is the policy as decideDevice's documentation states it:
// the first rule one of whose combinations matches decides.
var decidePolicy = []struct {
	when []decideCombo // any of them
	then decideOutcome
}{
	{[]decideCombo{{held: "held"}}, decideOutcome{err: ErrDeviceHeld}},
	{[]decideCombo{{binding: "before-binding", loaded: "same"}}, decideKeep},
	{[]decideCombo{{mode: "Never", loaded: "none"}, {mode: "Never", loaded: "other"}}, decideOutcome{err: ErrAFUNotLoaded}},
	{[]decideCombo{{mode: "Never"}}, decideKeep},
	{[]decideCombo{
		{mode: "IfNeeded", loaded: "same", pin: "unpinned", boot: "same-boot"},
		{mode: "IfNeeded", loaded: "same", pin: "unpinned", boot: "rebooted-found-loaded"},
		{mode: "IfNeeded", loaded: "same", pin: "pinned-loaded-here", boot: "same-boot"},
		{mode: "IfNeeded", loaded: "same", pin: "pinned-loaded-here", boot: "rebooted-found-loaded"},
		{mode: "IfNeeded", loaded: "same", pin: "unpinned", boot: "same-boot-programmed-before"},
		{mode: "IfNeeded", loaded: "same", pin: "pinned-loaded-here", boot: "same-boot-programmed-before"},
		{mode: "IfNeeded", loaded: "same", pin: "unpinned-loaded-here", boot: "same-boot"},
		{mode: "IfNeeded", loaded: "same", pin: "unpinned-loaded-here", boot: "rebooted-found-loaded"},
		{mode: "IfNeeded", loaded: "same", pin: "unpinned-loaded-here", boot: "same-boot-programmed-before"},
	}, decideKeep},
	{[]decideCombo{{programmable: "forbidden"}}, decideOutcome{err: ErrNotProgrammable}},
	{[]decideCombo{{}}, decideProgram},
}

// matches reports whether rule, a combination of decidePolicy, matches c.
func (rule decideCombo) matches(c decideCombo) bool {
	field := func(r, v string) bool { return r == "" || r == v }
	return field(rule.mode, c.mode) && field(rule.loaded, c.loaded) && field(rule.pin, c.pin) && field(rule.boot, c.boot) &&
		field(rule.binding, c.binding) && field(rule.programmable, c.programmable) && field(rule.held, c.held)
}

// expectDecision returns the outcome of the first rule of decidePolicy
// that matches c.
func expectDecision(t *testing.T, c decideCombo) decideOutcome {
	t.Helper()
	for _, r := range decidePolicy {
		for _, w := range r.when {
			if w.matches(c) {
				return r.then
			}
		}
	}
	t.Fatalf("no rule for %+v", c)
	return decideOutcome{}
}

// input returns the claim's config and the device's facts that c names.
func (c decideCombo) input() (*v1alpha1.FpgaConfig, deviceFacts) {
	modes := map[string]v1alpha1.ProgrammingPolicy{"Never": v1alpha1.ProgrammingNever, "Always": v1alpha1.ProgrammingAlways, "IfNeeded": v1alpha1.ProgrammingIfNeeded}
	loaded := map[string]string{"none": "", "same": afuA, "other": afuB}
	cfg := &v1alpha1.FpgaConfig{AFUID: afuA, InterfaceID: ifID, Programming: modes[c.mode]}
	f := deviceFacts{Device: "fpga-0000-01-00-0-p0", InterfaceIDs: []string{ifID}, LoadedAFU: loaded[c.loaded], Programmable: c.programmable == "programmable", HaveProgrammer: true}
	if c.pin == "pinned-loaded-here" || c.pin == "pinned-loaded-elsewhere" {
		cfg.SHA256 = shaX
	}
	if c.pin == "pinned-loaded-here" || c.pin == "unpinned-loaded-here" {
		f.LoadedSHA = shaX
	}
	f.Rebooted = c.boot == "rebooted-erased" || c.boot == "rebooted-found-loaded"
	f.ProgrammedBefore = c.boot == "rebooted-erased" || c.boot == "same-boot-programmed-before"
	f.ProgrammedForBinding = c.binding == "before-binding"
	if c.held == "held" {
		f.HeldBy = "default/other (uid-2)"
	}
	return cfg, f
}

// checkDecision checks that decideDevice decides want for cfg and f.
func checkDecision(t *testing.T, cfg *v1alpha1.FpgaConfig, f deviceFacts, want decideOutcome) {
	t.Helper()
	got, err := decideDevice(cfg, f)
	if want.err != nil {
		if !errors.Is(err, want.err) {
			t.Fatalf("error %v, want %v", err, want.err)
		}
		return
	}
	if err != nil {
		t.Fatalf("error %v, want program=%v", err, want.program)
	}
	if got.Program != want.program || got.AFU != afuA {
		t.Fatalf("plan %+v, want program=%v afu=%s", got, want.program, afuA)
	}
}
