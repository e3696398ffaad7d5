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
)

// DriverSelector is the CEL expression that selects every device of the
// driver.
func DriverSelector(driverName string) string {
	return fmt.Sprintf("device.driver == %q", driverName)
}

// LoadedSelector is the CEL expression that selects the driver's devices
// where afuID is loaded and, when interfaceID is not empty, whose region has
// that interface ID. A device without an afuID attribute (unreadable) is not
// selected; the expression never fails on it.
func LoadedSelector(driverName, afuID, interfaceID string) string {
	terms := []string{DriverSelector(driverName), equals(driverName, attrAFUID, afuID)}
	if interfaceID != "" {
		terms = append(terms, equals(driverName, attrInterfaceID, interfaceID))
	}
	return strings.Join(terms, " && ")
}

// ProgrammableSelector is the CEL expression that selects the driver's
// devices whose region has interfaceID, on nodes that allow programming.
func ProgrammableSelector(driverName, interfaceID string) string {
	return strings.Join([]string{
		DriverSelector(driverName),
		equals(driverName, attrInterfaceID, interfaceID),
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
