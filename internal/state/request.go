package state

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

// Holder identifies who prepares devices: a ResourceClaim, or for the
// legacy endpoint a synthetic holder.
type Holder struct {
	UID       types.UID
	Namespace string
	Name      string
}

func (h Holder) String() string { return fmt.Sprintf("%s/%s (%s)", h.Namespace, h.Name, h.UID) }

// DeviceRequest is one allocated device of a claim with the configuration
// that applies to it.
type DeviceRequest struct {
	Device   string
	Requests []string
	// Config is the FpgaConfig for the device; nil hands the port over as
	// it is.
	Config *v1alpha1.FpgaConfig
}

// PreparedDevice is what the kubelet gets for one device.
type PreparedDevice struct {
	Device       string
	Requests     []string
	CDIDeviceIDs []string
	AFUID        string
}

// Programming is the outcome of one programming job, for events and
// metrics.
type Programming struct {
	Device string
	AFUID  string
	// Bitstream is the file loaded: its path in the repository or its OCI
	// reference.
	Bitstream string
	// SHA256 is the digest of the file that was loaded; LayerDigest the
	// OCI layer it came from ("" from the repository).
	SHA256      string
	LayerDigest string
	Duration    time.Duration
	Err         error
}

// Outcome is the result of one Prepare.
type Outcome struct {
	Devices []PreparedDevice
	// Programmed lists the programming jobs whose results this call is
	// the first to report (finished successfully or not).
	Programmed []Programming
}

var (
	// ErrInProgress: programming is still running; call Prepare again.
	ErrInProgress = errors.New("programming in progress")
	// ErrDeviceHeld: a device is held by another holder.
	ErrDeviceHeld = errors.New("device already prepared for another claim")
	// ErrReleasing: the holder is being unprepared and a programming job
	// for it is still running; the devices are freed when it ends. Call
	// Unprepare again.
	ErrReleasing = errors.New("still releasing")
	// ErrNotProgrammable: the claim needs programming the node forbids.
	ErrNotProgrammable = errors.New("programming forbidden on this node")
	// ErrAFUNotLoaded: programming: Never, and the AFU is not there.
	ErrAFUNotLoaded = errors.New("accelerator function not loaded")
	// ErrChanged: Unprepare with IfUnchanged found the holder prepared
	// since; nothing was released.
	ErrChanged = errors.New("holder changed")
	// ErrNotHeld: a device is not prepared for the holder that asked.
	ErrNotHeld = errors.New("device not prepared for this holder")
	// ErrDraining: the State takes no more work (Drain); the caller's
	// retry reaches the process that takes the node over.
	ErrDraining = errors.New("the driver is stopping on this node")
)
