package controller

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

// syncAcceleratorFunction reconciles one AcceleratorFunction: its
// DeviceClasses (none once it is deleted or invalid) and its status.
func (c *Controller) syncAcceleratorFunction(ctx context.Context, name string) error {
	owner := key{kind: v1alpha1.AcceleratorFunctionKind, name: name}
	obj, err := c.functions.Get(name)
	if apierrors.IsNotFound(err) {
		// The garbage collector deletes the classes too; this is quicker
		// and covers a collector that is off.
		_, err := c.applyClasses(ctx, owner, nil)
		return err
	}
	if err != nil {
		return fmt.Errorf("get AcceleratorFunction %s from the informer cache: %w", name, err)
	}
	af := &v1alpha1.AcceleratorFunction{}
	if err := fromUnstructured(obj, af); err != nil {
		return err
	}
	if deleting, err := c.deleting(ctx, owner, af); deleting {
		return err
	}

	var r classResult
	var want []*resourceapi.DeviceClass
	if errs := v1alpha1.ValidateAcceleratorFunction(af); len(errs) > 0 {
		r.invalid = errs.ToAggregate()
	} else if want, err = AcceleratorFunctionClasses(af, c.driverName, c.extendedResourceDomain); err != nil {
		r.invalid = err
	}
	for _, w := range want {
		r.names = append(r.names, w.Name)
	}
	r.applied, r.err = c.applyClasses(ctx, owner, want)

	var loaded, programmable int32
	if r.invalid == nil {
		devices, err := c.publishedDevices()
		if err != nil {
			return errors.Join(r.err, err)
		}
		s := af.Spec
		if loaded, err = c.countMatching(ctx, NameClassSelector(c.driverName, s), devices); err != nil {
			return errors.Join(r.err, err)
		}
		if s.Mode == v1alpha1.ModeRegion {
			if programmable, err = c.countMatching(ctx, ProgrammableSelector(c.driverName, s.InterfaceID), devices); err != nil {
				return errors.Join(r.err, err)
			}
		}
	}

	status := af.Status.DeepCopy()
	status.ObservedGeneration = af.Generation
	status.DeviceClasses = r.names
	status.LoadedDevices, status.ProgrammableDevices = loaded, programmable
	meta.SetStatusCondition(&status.Conditions, readyCondition(af.Generation, v1alpha1.AcceleratorFunctionKind, r))
	none := fmt.Sprintf("no untainted device of driver %s has AFU %s loaded", c.driverName, af.Spec.AFUID)
	if af.Spec.Mode == v1alpha1.ModeRegion {
		none += fmt.Sprintf(" and no programmable device has a region with interface ID %s", af.Spec.InterfaceID)
	}
	meta.SetStatusCondition(&status.Conditions, devicesCondition(af.Generation, loaded+programmable, none))
	if equality.Semantic.DeepEqual(&af.Status, status) {
		return r.err
	}
	af.Status = *status
	return errors.Join(r.err, c.writeStatus(ctx, v1alpha1.AcceleratorFunctionKind, af))
}
