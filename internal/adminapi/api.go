// Package adminapi is the node daemon's local control socket: a small
// HTTP/JSON API on a unix socket (mode 0600, so root only) through which
// the programming hook asks the daemon to program a region, and through
// which an admin can list the node's devices, their health and who holds
// each. The daemon owns the bitstream repository, the per-port locks and
// the checks; callers send IDs, never bitstream paths.
//
//	POST /v1/program  ProgramRequest -> ProgramResponse
//	GET  /v1/devices  -> DeviceList
//
// Errors come back as a non-2xx status with an ErrorResponse body; the
// Client turns them into *Error.
package adminapi

// API paths.
const (
	ProgramPath = "/v1/program"
	DevicesPath = "/v1/devices"
)

// ProgramRequest asks for the accelerator function AFUID to be loaded into
// the region behind Device, whose interface ID must be InterfaceID.
type ProgramRequest struct {
	// Device names a port: its device node ("/dev/dfl-port.0"), kernel
	// name ("dfl-port.0") or DRA device name ("fpga-0000-81-00-0-p0"); or
	// a card by its name ("dfl-fme.0", the region-mode device ID) when the
	// card has exactly one port.
	Device string `json:"device"`
	// InterfaceID and AFUID are 32 hex digits (dashes and upper case are
	// accepted and canonicalised).
	InterfaceID string `json:"interfaceID"`
	AFUID       string `json:"afuID"`
	// Admin asks, for an administrator, to program a port nobody holds:
	// the daemon holds it for the time of programming (refusing it while a
	// claim or an allocation holds it) and releases it afterwards.
	Admin bool `json:"admin,omitempty"`
}

// ProgramResponse says what was done.
type ProgramResponse struct {
	// Device is the port's DRA device name, Node its device node.
	Device string `json:"device"`
	Node   string `json:"node"`
	AFUID  string `json:"afuID"`
	// Programmed is false when the AFU was loaded already.
	Programmed bool `json:"programmed"`
	// Bitstream is the repository file that was loaded.
	Bitstream string `json:"bitstream,omitempty"`
	// DurationSeconds is how long programming took.
	DurationSeconds float64 `json:"durationSeconds,omitempty"`
}

// DeviceList is every port of the node, and the daemon's own state.
type DeviceList struct {
	// Mode is the API the daemon serves: "dra" or "device-plugin".
	Mode string `json:"mode,omitempty"`
	// Registered is true once the kubelet accepted the daemon's
	// registration (DRA mode); absent when unknown.
	Registered *bool    `json:"registered,omitempty"`
	Devices    []Device `json:"devices"`
}

// Device is one port as the daemon sees it.
type Device struct {
	// Name is the DRA device name, Node the port's device node.
	Name  string `json:"name"`
	Node  string `json:"node"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	// Card is the card's PCI address, CardName the card's name (its
	// management node, "dfl-fme.0": the region-mode device ID);
	// PCIAddress is the function carrying the port.
	Card        string `json:"card"`
	CardName    string `json:"cardName"`
	PCIAddress  string `json:"pciAddress"`
	NUMANode    int    `json:"numaNode"`
	InterfaceID string `json:"interfaceID"`
	AFUID       string `json:"afuID"`
	Healthy     bool   `json:"healthy"`
	// Health says why the port is unhealthy ("healthy" otherwise).
	Health string `json:"health"`
	// Holder holds the port; nil when it is free.
	Holder *Holder `json:"holder,omitempty"`
}

// Holder is a DRA claim, or a device-plugin allocation (namespace
// "device-plugin", name the resource).
type Holder struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ErrorResponse is the body of every error.
type ErrorResponse struct {
	Error string `json:"error"`
}
