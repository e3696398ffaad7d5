package v1alpha1

// Condition types of AcceleratorFunction and FpgaRegion status.
const (
	// ConditionReady is True when every DeviceClass the object asks for
	// exists and matches its spec.
	ConditionReady = "Ready"
	// ConditionDevicesAvailable is True when ResourceSlices publish at
	// least one untainted device that one of the object's DeviceClasses
	// selects.
	ConditionDevicesAvailable = "DevicesAvailable"
)

// Condition reasons.
const (
	// ReasonDeviceClassesReady: every DeviceClass is in place.
	ReasonDeviceClassesReady = "DeviceClassesReady"
	// ReasonDeviceClassConflict: a DeviceClass of the wanted name exists
	// and belongs to something else; it is left alone.
	ReasonDeviceClassConflict = "DeviceClassConflict"
	// ReasonDeviceClassError: writing a DeviceClass failed; the controller
	// retries.
	ReasonDeviceClassError = "DeviceClassError"
	// ReasonInvalidSpec: the spec breaks a rule the API server did not
	// enforce (the webhook was bypassed); nothing is created.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonDevicesFound: matching devices are published.
	ReasonDevicesFound = "DevicesFound"
	// ReasonNoDevices: no matching untainted device is published.
	ReasonNoDevices = "NoDevices"
)
