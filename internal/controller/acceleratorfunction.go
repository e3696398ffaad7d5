package controller

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	} else if want, err = AcceleratorFunctionClasses(af, c.driverName, c.extendedResourceDomainOf(af)); err != nil {
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

// extendedResourceDomainOf returns the extended resource domain af's class
// serves its name in: Config.ExtendedResourceDomain when af is the function
// that holds the name, else "" (none). The API wants a DeviceClass's
// extendedResourceName unique, and the scheduler serves a shared one with
// the class created last, so of the valid functions with af's interface and
// AFU IDs (which give the name) that are not being deleted only the oldest
// serves it, ties going to the first name.
func (c *Controller) extendedResourceDomainOf(af *v1alpha1.AcceleratorFunction) string {
	if c.extendedResourceDomain == "" || af.Spec.InterfaceID == "" {
		return c.extendedResourceDomain
	}
	objs, err := c.functions.List(labelsEverything)
	if err != nil {
		// An informer lister does not fail; serve the name rather than
		// drop it on a guess.
		return c.extendedResourceDomain
	}
	for _, obj := range objs {
		if m, ok := obj.(metav1.Object); !ok || m.GetName() == af.Name {
			continue
		}
		// Only functions of af's IDs are converted and validated.
		if ifID, afuID := functionIDs(obj); ifID != af.Spec.InterfaceID || afuID != af.Spec.AFUID {
			continue
		}
		other := &v1alpha1.AcceleratorFunction{}
		if fromUnstructured(obj, other) != nil || other.DeletionTimestamp != nil ||
			len(v1alpha1.ValidateAcceleratorFunction(other)) > 0 || c.classTakenFrom(other) {
			continue
		}
		if other.CreationTimestamp.Before(&af.CreationTimestamp) ||
			(other.CreationTimestamp.Equal(&af.CreationTimestamp) && other.Name < af.Name) {
			return ""
		}
	}
	return c.extendedResourceDomain
}

// classTakenFrom reports whether the name of af's loaded DeviceClass is
// held by another owner (a name conflict): af then has no class to
// serve the extended resource name with.
func (c *Controller) classTakenFrom(af *v1alpha1.AcceleratorFunction) bool {
	existing, err := c.classes.Get(af.Name)
	if err != nil {
		return false
	}
	k, ok := ownerKey(existing)
	return !ok || k != (key{kind: v1alpha1.AcceleratorFunctionKind, name: af.Name})
}

// functionIDs returns the interface and AFU IDs of an AcceleratorFunction
// from the informer, "" for those it lacks.
func functionIDs(obj any) (interfaceID, afuID string) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return "", ""
	}
	interfaceID, _, _ = unstructured.NestedString(u.Object, "spec", "interfaceID")
	afuID, _, _ = unstructured.NestedString(u.Object, "spec", "afuID")
	return interfaceID, afuID
}

// enqueueSharingIDs enqueues every AcceleratorFunction with the
// interface and AFU IDs of obj (an informer's object, not a tombstone):
// which of them serves the extended resource name may have changed with
// obj (extendedResourceDomainOf).
func (c *Controller) enqueueSharingIDs(obj any) {
	ifID, afuID := functionIDs(obj)
	if ifID == "" || c.extendedResourceDomain == "" {
		return
	}
	objs, _ := c.functions.List(labelsEverything)
	for _, o := range objs {
		if i, a := functionIDs(o); i == ifID && a == afuID {
			c.queue.Add(key{kind: v1alpha1.AcceleratorFunctionKind, name: o.(metav1.Object).GetName()})
		}
	}
}
