package deviceplugin

import (
	"fmt"
)

// Mode is how the endpoint carves a node's FPGAs into extended resources.
type Mode string

const (
	// ModeAF advertises one resource per (interface ID, AFU ID) pair with
	// one device per port: the accelerator functions already loaded.
	ModeAF Mode = "af"
	// ModeRegion advertises one resource per interface ID with one device
	// per card: regions a createRuntime hook programs for the container.
	ModeRegion Mode = "region"
)

// ParseMode accepts "af" and "region".
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeAF, ModeRegion:
		return Mode(s), nil
	}
	return "", fmt.Errorf("device-plugin mode %q is not one of %s, %s", s, ModeAF, ModeRegion)
}
