package controller

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/claimroute"
	"github.com/fpga-dra/fpga-dra-driver/internal/reconcile"
)

// ClaimRouter labels every ResourceClaim whose devices of the driver wait
// for binding conditions with the node they are allocated on
// (claimroute.Label), and removes the label when the claim no longer waits
// there, so that each node daemon watches only its own claims. It is the
// one cluster-wide watch of claims; run it leader-elected.
type ClaimRouter struct {
	driverName string
	kube       kubernetes.Interface
	factory    informers.SharedInformerFactory
	claims     resourcelisters.ResourceClaimLister
	synced     cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// NewClaimRouter returns a router for driverName's claims.
func NewClaimRouter(driverName string, kube kubernetes.Interface) (*ClaimRouter, error) {
	factory := informers.NewSharedInformerFactory(kube, 0)
	inf := factory.Resource().V1().ResourceClaims()
	r := &ClaimRouter{
		driverName: driverName,
		kube:       kube,
		factory:    factory,
		claims:     inf.Lister(),
		synced:     inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "claim-router"}),
	}
	enqueue := func(obj any) {
		if name, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			r.queue.Add(name)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("claim router: %w", err)
	}
	return r, nil
}

// Run routes claims until ctx ends.
func (r *ClaimRouter) Run(ctx context.Context, workers int) error {
	defer r.queue.ShutDown()
	r.factory.Start(ctx.Done())
	defer r.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), r.synced) {
		return fmt.Errorf("claim router: informer did not sync: %w", context.Cause(ctx))
	}
	reconcile.Run(ctx, r.queue, workers, r.route, func(ctx context.Context, name cache.ObjectName, err error) {
		utilruntime.HandleErrorWithContext(ctx, err, "Routing ResourceClaim failed; retrying", "claim", name)
	})
	return nil
}

// route sets or removes one claim's node label.
func (r *ClaimRouter) route(ctx context.Context, name cache.ObjectName) error {
	claim, err := r.claims.ResourceClaims(name.Namespace).Get(name.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	key := claimroute.Label(r.driverName)
	var want *string
	if node, pending := claimroute.Node(claim, r.driverName); pending && node != "" {
		v := claimroute.Value(node)
		want = &v
	}
	have, labelled := claim.Labels[key]
	if (want == nil && !labelled) || (want != nil && labelled && have == *want) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": claim.ResourceVersion, // route what was seen
		"labels":          map[string]any{key: want},
	}})
	if err != nil {
		return err
	}
	_, err = r.kube.ResourceV1().ResourceClaims(claim.Namespace).Patch(ctx, claim.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return fmt.Errorf("claim %s changed meanwhile: %w", name, err) // the informer brings the new version
	case err != nil:
		return fmt.Errorf("label claim %s: %w", name, err)
	}
	klog.FromContext(ctx).V(3).Info("Routed claim", "claim", klog.KObj(claim), "node", want)
	return nil
}
