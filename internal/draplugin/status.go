package draplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Condition types the driver sets on its devices in claim.status.devices:
// the binding condition and binding failure condition (qualified by the
// driver name, as the devices carry them in the ResourceSlice), and Ready
// once the kubelet prepared the device.
const (
	ConditionProgrammed        = "programmed"
	ConditionProgrammingFailed = "programming-failed"
	ConditionReady             = "Ready"
)

// Field managers of the status the driver writes: the binding worker's
// conditions and the prepare's never remove each other's.
const (
	fieldManagerBinding = "fpga-dra-driver/binding"
	fieldManagerPrepare = "fpga-dra-driver/prepare"
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

// applyDeviceStatus writes the driver's entries of a claim's
// status.devices with server-side apply, as fieldManager. With
// resourceVersion set, the claim must still be at that version (a
// programming outcome for an allocation that changed meanwhile is not
// written); a conflict is retried by the caller.
func applyDeviceStatus(ctx context.Context, client kubernetes.Interface, claim *resourceapi.ResourceClaim, driverName, fieldManager, resourceVersion string, entries []deviceStatus) error {
	status := resourceapply.ResourceClaimStatus()
	for _, e := range entries {
		d := resourceapply.AllocatedDeviceStatus().WithDriver(driverName).WithPool(e.pool).WithDevice(e.device)
		for _, c := range e.conditions {
			d = d.WithConditions(metav1apply.Condition().
				WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).WithMessage(c.Message).
				WithLastTransitionTime(c.LastTransitionTime).WithObservedGeneration(claim.Generation))
		}
		if e.data != nil {
			raw, err := json.Marshal(e.data)
			if err != nil {
				return fmt.Errorf("encode device status data: %w", err)
			}
			d = d.WithData(runtime.RawExtension{Raw: raw})
		}
		status = status.WithDevices(d)
	}
	apply := resourceapply.ResourceClaim(claim.Name, claim.Namespace).WithStatus(status)
	if resourceVersion != "" {
		apply = apply.WithResourceVersion(resourceVersion)
	}
	_, err := client.ResourceV1().ResourceClaims(claim.Namespace).ApplyStatus(ctx, apply, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("write the status of claim %s/%s: %w", claim.Namespace, claim.Name, err)
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
	case errors.Is(err, state.ErrNotProgrammable):
		return "NotProgrammable"
	case errors.Is(err, state.ErrAFUNotLoaded):
		return "AFUNotLoaded"
	case errors.Is(err, state.ErrDeviceHeld):
		return "DeviceHeld"
	}
	return "Failed"
}

// isConflict reports a write refused for a stale resource version.
func isConflict(err error) bool { return apierrors.IsConflict(err) }
