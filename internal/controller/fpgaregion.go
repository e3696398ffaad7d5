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

// syncFpgaRegion reconciles one FpgaRegion: its DeviceClass (none once it is
// deleted or invalid) and its status.
func (c *Controller) syncFpgaRegion(ctx context.Context, name string) error {
	owner := key{kind: v1alpha1.FpgaRegionKind, name: name}
	obj, err := c.regions.Get(name)
	if apierrors.IsNotFound(err) {
		_, err := c.applyClasses(ctx, owner, nil)
		return err
	}
	if err != nil {
		return fmt.Errorf("get FpgaRegion %s from the informer cache: %w", name, err)
	}
	region := &v1alpha1.FpgaRegion{}
	if err := fromUnstructured(obj, region); err != nil {
		return err
	}
	if deleting, err := c.deleting(ctx, owner, region); deleting {
		return err
	}

	var r classResult
	var want []*resourceapi.DeviceClass
	if errs := v1alpha1.ValidateFpgaRegion(region); len(errs) > 0 {
		r.invalid = errs.ToAggregate()
	} else {
		want = []*resourceapi.DeviceClass{FpgaRegionClass(region, c.driverName)}
		r.names = []string{region.Name}
	}
	r.applied, r.err = c.applyClasses(ctx, owner, want)

	var n int32
	if r.invalid == nil {
		devices, err := c.publishedDevices()
		if err != nil {
			return errors.Join(r.err, err)
		}
		if n, err = c.countMatching(ctx, ProgrammableSelector(c.driverName, region.Spec.InterfaceID), devices); err != nil {
			return errors.Join(r.err, err)
		}
	}

	status := region.Status.DeepCopy()
	status.ObservedGeneration = region.Generation
	status.DeviceClass = ""
	if len(r.names) > 0 {
		status.DeviceClass = r.names[0]
	}
	status.Devices = n
	meta.SetStatusCondition(&status.Conditions, readyCondition(region.Generation, v1alpha1.FpgaRegionKind, r))
	meta.SetStatusCondition(&status.Conditions, devicesCondition(region.Generation, n,
		fmt.Sprintf("no untainted programmable device of driver %s has a region with interface ID %s", c.driverName, region.Spec.InterfaceID)))
	if equality.Semantic.DeepEqual(&region.Status, status) {
		return r.err
	}
	region.Status = *status
	return errors.Join(r.err, c.writeStatus(ctx, v1alpha1.FpgaRegionKind, region))
}
