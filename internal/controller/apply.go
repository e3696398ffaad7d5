package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// applied is what applyClasses did.
type applied struct {
	// conflicts names wanted classes that exist and belong to something
	// else; they were left alone.
	conflicts []string
}

// applyClasses makes the DeviceClasses owned by owner exactly want: it
// creates missing ones, updates changed ones, adopts ones whose controller
// reference names owner's kind and name with another UID (a re-created
// owner), and deletes owned classes not in want. A class of a wanted name
// with another controller, or none, is a conflict and left alone. The first
// write error is returned after every other class was tried.
func (c *Controller) applyClasses(ctx context.Context, owner key, want []*resourceapi.DeviceClass) (applied, error) {
	logger := klog.FromContext(ctx)
	var res applied
	var firstErr error
	record := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.Name] = true
		existing, err := c.classes.Get(w.Name)
		switch {
		case apierrors.IsNotFound(err):
			created, err := c.kube.ResourceV1().DeviceClasses().Create(ctx, w, metav1.CreateOptions{FieldManager: FieldManager})
			if err != nil {
				// AlreadyExists: the cache is behind; the class event
				// brings this owner back.
				record(fmt.Errorf("create DeviceClass %s: %w", w.Name, err))
				continue
			}
			c.noteDroppedFields(ctx, w, created)
			logger.Info("Created DeviceClass", "deviceClass", w.Name)
		case err != nil:
			record(fmt.Errorf("get DeviceClass %s from the informer cache: %w", w.Name, err))
		default:
			if k, ok := ownerKey(existing); !ok || k != owner {
				res.conflicts = append(res.conflicts, w.Name)
				continue
			}
			if upToDate(existing, w, c.dropsExtendedResourceName.Load()) {
				continue
			}
			update := existing.DeepCopy()
			update.Labels = mergeLabels(existing.Labels, w.Labels)
			update.OwnerReferences = append(otherOwners(existing.OwnerReferences), w.OwnerReferences...)
			update.Spec = w.Spec
			updated, err := c.kube.ResourceV1().DeviceClasses().Update(ctx, update, metav1.UpdateOptions{FieldManager: FieldManager})
			if err != nil {
				record(fmt.Errorf("update DeviceClass %s: %w", w.Name, err))
				continue
			}
			c.noteDroppedFields(ctx, w, updated)
			logger.Info("Updated DeviceClass", "deviceClass", w.Name)
		}
	}

	owned, err := c.classInformer.GetIndexer().ByIndex(ownerIndex, owner.String())
	if err != nil {
		record(fmt.Errorf("list the DeviceClasses of %s from the informer cache: %w", owner, err))
	}
	for _, obj := range owned {
		class, ok := obj.(*resourceapi.DeviceClass)
		if !ok || wanted[class.Name] {
			continue
		}
		// The resource version too: a class the cache has as ours may
		// have been orphaned since (kubectl delete --cascade=orphan: the
		// collector drops its owner reference before the owner goes).
		err := c.kube.ResourceV1().DeviceClasses().Delete(ctx, class.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &class.UID, ResourceVersion: &class.ResourceVersion},
		})
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone already, or re-created since: the event brings the
			// owner back if it matters.
		case err != nil:
			record(fmt.Errorf("delete DeviceClass %s: %w", class.Name, err))
		default:
			logger.Info("Deleted DeviceClass", "deviceClass", class.Name)
		}
	}
	return res, firstErr
}

// upToDate reports whether existing already has want's spec, labels and
// controller reference. Opaque parameters are compared as JSON values: the
// API server may re-encode them.
func upToDate(existing, want *resourceapi.DeviceClass, ignoreExtendedResourceName bool) bool {
	for k, v := range want.Labels {
		if existing.Labels[k] != v {
			return false
		}
	}
	ref := metav1.GetControllerOfNoCopy(existing)
	if ref == nil || !reflect.DeepEqual(*ref, want.OwnerReferences[0]) {
		return false
	}
	a, b := existing.Spec.DeepCopy(), want.Spec.DeepCopy()
	if ignoreExtendedResourceName {
		b.ExtendedResourceName = a.ExtendedResourceName
	}
	if len(a.Config) != len(b.Config) {
		return false
	}
	for i := range a.Config {
		pa, pb := a.Config[i].Opaque, b.Config[i].Opaque
		if (pa == nil) != (pb == nil) {
			return false
		}
		if pa == nil {
			continue
		}
		if !sameJSON(pa.Parameters.Raw, pb.Parameters.Raw) {
			return false
		}
		pa.Parameters = pb.Parameters // equal as JSON: let DeepEqual skip them
	}
	return equality.Semantic.DeepEqual(a, b)
}

// sameJSON reports whether a and b encode the same JSON value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// mergeLabels returns have with want's labels set.
func mergeLabels(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}

// otherOwners returns refs without the controller reference.
func otherOwners(refs []metav1.OwnerReference) []metav1.OwnerReference {
	return slices.DeleteFunc(slices.Clone(refs), func(r metav1.OwnerReference) bool {
		return r.Controller != nil && *r.Controller
	})
}

// noteDroppedFields notices an API server that did not keep a class's
// extendedResourceName (the DRAExtendedResource feature is off there, as
// it can be before Kubernetes 1.37): from then on the field is left out of
// the comparison, or every reconcile would update the class again.
func (c *Controller) noteDroppedFields(ctx context.Context, want, got *resourceapi.DeviceClass) {
	if want.Spec.ExtendedResourceName == nil || got == nil || got.Spec.ExtendedResourceName != nil {
		return
	}
	if !c.dropsExtendedResourceName.Swap(true) {
		klog.FromContext(ctx).Info("The API server does not keep DeviceClass extendedResourceName (is the DRAExtendedResource feature gate off?): pods that ask for an accelerator function's extended resource are not served through DRA on this cluster", "deviceClass", want.Name, "extendedResourceName", *want.Spec.ExtendedResourceName)
	}
}

// deleting reports whether owner o is being deleted, and then leaves its
// classes to the garbage collector: with propagation Orphan the collector
// keeps them (it removes their owner references), so they are neither
// created nor deleted; otherwise (foreground deletion, or a finalizer) it
// is deleting them, and they are deleted rather than created again,
// which would fight it and keep a class allocatable.
func (c *Controller) deleting(ctx context.Context, owner key, o metav1.Object) (bool, error) {
	switch {
	case o.GetDeletionTimestamp() == nil:
		return false, nil
	case slices.Contains(o.GetFinalizers(), metav1.FinalizerOrphanDependents):
		return true, nil
	}
	_, err := c.applyClasses(ctx, owner, nil)
	return true, err
}
