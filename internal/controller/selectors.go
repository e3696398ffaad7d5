package controller

import (
	"fmt"
	"strings"
)

// Device attributes the selectors use, qualified by the driver name in a
// ResourceSlice. They are the names the node daemon publishes
// (internal/draplugin); a test checks that they stay the same.
const (
	attrAFUID        = "afuID"
	attrInterfaceID  = "interfaceID"
	attrProgrammable = "programmable"
	// maxInterfaceIDs is how many interface ID attributes a device may
	// carry: interfaceID, then interfaceID2 up to interfaceID4 (an Alveo
	// shell lists several; discovery.MaxInterfaceIDs).
	maxInterfaceIDs = 4
)

// DriverSelector is the CEL expression that selects every device of the
// driver.
func DriverSelector(driverName string) string {
	return fmt.Sprintf("device.driver == %q", driverName)
}

// LoadedSelector is the CEL expression that selects the driver's devices
// where afuID is loaded and, when interfaceID is not empty, whose region
// accepts that interface ID (hasInterface). A device without an afuID attribute (unreadable) is not
// selected; the expression never fails on it.
func LoadedSelector(driverName, afuID, interfaceID string) string {
	terms := []string{DriverSelector(driverName), equals(driverName, attrAFUID, afuID)}
	if interfaceID != "" {
		terms = append(terms, hasInterface(driverName, interfaceID))
	}
	return strings.Join(terms, " && ")
}

// ProgrammableSelector is the CEL expression that selects the driver's
// devices whose region accepts interfaceID (hasInterface), on nodes that
// allow programming.
func ProgrammableSelector(driverName, interfaceID string) string {
	return strings.Join([]string{
		DriverSelector(driverName),
		hasInterface(driverName, interfaceID),
		programmable(driverName),
	}, " && ")
}

// PinnedLoadedSelector is LoadedSelector on nodes that allow programming:
// a pinned function's loaded class checks the pin, which may mean
// programming the region.
func PinnedLoadedSelector(driverName, afuID, interfaceID string) string {
	return LoadedSelector(driverName, afuID, interfaceID) + " && " + programmable(driverName)
}

// programmable is a CEL term that is true on devices of nodes that allow
// programming.
func programmable(driverName string) string {
	return fmt.Sprintf("%q in %s && %s", attrProgrammable, attributes(driverName), attribute(driverName, attrProgrammable))
}

// hasInterface is a CEL term that is true when one of the device's
// interface ID attributes is value: a region accepts a bitstream built for
// any of them.
func hasInterface(driverName, value string) string {
	terms := []string{equals(driverName, attrInterfaceID, value)}
	for i := 2; i <= maxInterfaceIDs; i++ {
		terms = append(terms, equals(driverName, fmt.Sprintf("%s%d", attrInterfaceID, i), value))
	}
	return "(" + strings.Join(terms, " || ") + ")"
}

// equals is a CEL term that is true when the device has the string
// attribute name with value, and false (not an error) when it lacks it.
func equals(driverName, name, value string) string {
	return fmt.Sprintf("%q in %s && %s == %q", name, attributes(driverName), attribute(driverName, name), value)
}

func attributes(driverName string) string {
	return fmt.Sprintf("device.attributes[%q]", driverName)
}

func attribute(driverName, name string) string {
	return attributes(driverName) + "." + name
}
