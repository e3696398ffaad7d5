package draplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Condition types the driver sets on its devices in claim.status.devices:
// the binding condition and binding failure condition (qualified by the
// driver name, as the devices carry them in the ResourceSlice), and Ready
// once the kubelet prepared the device.
const (
	ConditionProgrammed        = deviceslice.ConditionProgrammed
	ConditionProgrammingFailed = deviceslice.ConditionProgrammingFailed
	ConditionReady             = "Ready"
)

// DeviceData is what the driver reports about a device in its claim's
// status (status.devices[].data): what a user wants to know about the
// region the claim got.
type DeviceData struct {
	AFUID       string `json:"afuID,omitempty"`
	InterfaceID string `json:"interfaceID,omitempty"`
	// Bitstream is the file the driver loaded for the claim (a repository
	// path or an OCI reference), SHA256 its digest; empty when the region
	// carried the function already.
	Bitstream string `json:"bitstream,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
	// ProgrammingSeconds is how long programming took, ProgrammedAt when
	// it ended.
	ProgrammingSeconds float64      `json:"programmingSeconds,omitempty"`
	ProgrammedAt       *metav1.Time `json:"programmedAt,omitempty"`
	// DeviceNodes are the nodes a container gets.
	DeviceNodes []string `json:"deviceNodes,omitempty"`
}

// deviceStatus is one device's entry the driver writes.
type deviceStatus struct {
	pool, device string
	conditions   []metav1.Condition
	data         *DeviceData
}

// qualified is a condition type qualified by the driver name.
func qualified(driverName, condition string) string { return driverName + "/" + condition }

// errAllocationChanged is returned by writeDeviceStatus when the claim
// was deallocated or allocated again since the version the entries were
// made for.
var errAllocationChanged = errors.New("the claim's allocation changed")

// writeDeviceStatus sets the driver's entries in a claim's status.devices,
// starting from claim: a condition replaces the one of its type (its
// transition time kept while its status is unchanged), data replaces the
// device's data where an entry has some, other drivers' entries and other
// conditions stay. The write is an update of the status subresource at the
// version read, so nothing written meanwhile is lost: on a conflict it
// reads the claim again and retries while the claim keeps the same
// allocation, else it returns errAllocationChanged. It returns the
// version it wrote over.
//
// Server-side apply is not used: kube-apiserver 1.37 refused an apply of
// a claim's status whose allocation carries an opaque config ("may not
// change status.allocation"), and pods then waited for their binding
// conditions for ever.
func writeDeviceStatus(ctx context.Context, client kubernetes.Interface, claim *resourceapi.ResourceClaim, driverName string, entries []deviceStatus) (string, error) {
	claims := client.ResourceV1().ResourceClaims(claim.Namespace)
	cur := claim
	for attempt := 0; ; attempt++ {
		next := cur.DeepCopy()
		if err := mergeDeviceStatus(next, driverName, entries); err != nil {
			return "", err
		}
		_, err := claims.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			return cur.ResourceVersion, nil
		}
		if !apierrors.IsConflict(err) || attempt >= 10 {
			return "", fmt.Errorf("write the status of claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		fresh, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("read claim %s/%s again after a conflicting write: %w", claim.Namespace, claim.Name, err)
		}
		if fresh.UID != claim.UID || !sameAllocation(fresh, claim) {
			return "", errAllocationChanged
		}
		cur = fresh
	}
}

// mergeDeviceStatus sets entries in claim.status.devices (see
// writeDeviceStatus).
func mergeDeviceStatus(claim *resourceapi.ResourceClaim, driverName string, entries []deviceStatus) error {
	for _, e := range entries {
		i := slices.IndexFunc(claim.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool {
			return d.Driver == driverName && d.Pool == e.pool && d.Device == e.device && d.ShareID == nil
		})
		if i < 0 {
			claim.Status.Devices = append(claim.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: driverName, Pool: e.pool, Device: e.device})
			i = len(claim.Status.Devices) - 1
		}
		d := &claim.Status.Devices[i]
		for _, c := range e.conditions {
			c.ObservedGeneration = claim.Generation
			apimeta.SetStatusCondition(&d.Conditions, c)
		}
		if e.data != nil {
			raw, err := json.Marshal(e.data)
			if err != nil {
				return fmt.Errorf("encode device status data: %w", err)
			}
			d.Data = &runtime.RawExtension{Raw: raw}
		}
	}
	return nil
}

// condition is a condition that changed now.
func condition(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	const maxMessage = 4096 // enough for any error of ours; the API allows 32768
	if len(message) > maxMessage {
		message = message[:maxMessage]
	}
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(time.Now())}
}

// failureReason classifies a programming error for the failure
// condition's reason.
func failureReason(err error) string {
	switch {
	case errors.Is(err, program.ErrNotFound):
		return "BitstreamNotFound"
	case errors.Is(err, program.ErrInterfaceMismatch):
		return "InterfaceMismatch"
	case errors.Is(err, program.ErrFormatMismatch):
		return "FormatMismatch"
	case errors.Is(err, program.ErrChecksumMismatch):
		return "ChecksumMismatch"
	case errors.Is(err, program.ErrInvalidBitstream), errors.Is(err, program.ErrBitstreamChanged):
		return "InvalidBitstream"
	case errors.Is(err, program.ErrVerifyFailed):
		return "VerificationFailed"
	case errors.Is(err, program.ErrProgramFailed):
		return "ProgrammingFailed"
	case errors.Is(err, program.ErrDevicesChanged):
		return "DevicesRenumbered"
	case errors.Is(err, state.ErrNotProgrammable):
		return "NotProgrammable"
	case errors.Is(err, state.ErrAFUNotLoaded):
		return "AFUNotLoaded"
	case errors.Is(err, state.ErrDeviceHeld):
		return "DeviceHeld"
	}
	return "Failed"
}
