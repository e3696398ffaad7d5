// Package controller is the fpga-dra-controller's reconciler. It turns
// AcceleratorFunctions and FpgaRegions (api/v1alpha1) into DeviceClasses for
// the DRA driver, owned by them, and reports in their status whether the
// classes are in place and how many published devices they select.
//
// It uses client-go informers and one rate-limited workqueue: the custom
// resources through the dynamic client (no generated clientset), DeviceClasses
// and ResourceSlices through the typed one. Every change of a custom resource,
// of a DeviceClass or of the driver's ResourceSlices enqueues the objects it
// concerns; a reconciliation computes the wanted classes from scratch, so it
// is idempotent and safe to repeat.
package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/reconcile"
)

// FieldManager is the field manager of every write the controller makes.
const FieldManager = "fpga-dra-controller"

// Config configures a Controller.
type Config struct {
	// DriverName is the DRA driver's name: the driver of the devices the
	// classes select and the domain of their attributes. Required.
	DriverName string
	// KubeClient reads ResourceSlices and writes DeviceClasses. Required.
	KubeClient kubernetes.Interface
	// DynamicClient reads AcceleratorFunctions and FpgaRegions and writes
	// their status. Required.
	DynamicClient dynamic.Interface
	// ExtendedResourceDomain, when not empty, gives each AcceleratorFunction's
	// loaded class the extended resource name the device-plugin endpoint
	// uses in this domain (see AcceleratorFunctionClasses); of functions
	// with the same IDs, and so the same name, only the oldest one's class
	// carries it.
	ExtendedResourceDomain string
	// ResyncPeriod is how often every object is reconciled again without a
	// change; 0 never.
	ResyncPeriod time.Duration
	// Metrics records reconciliations; nil records nothing.
	Metrics *Metrics
}

// Controller keeps the DeviceClasses of AcceleratorFunctions and
// FpgaRegions. Create it with New and start it with Run.
type Controller struct {
	driverName string
	// extendedResourceDomain is Config.ExtendedResourceDomain.
	extendedResourceDomain string
	// dropsExtendedResourceName is set once the API server was seen not
	// to keep a class's extendedResourceName (noteDroppedFields).
	dropsExtendedResourceName atomic.Bool
	kube                      kubernetes.Interface
	dynamic                   dynamic.Interface
	metrics                   *Metrics

	factories     []factory
	classInformer cache.SharedIndexInformer
	classes       resourcelisters.DeviceClassLister
	slices        resourcelisters.ResourceSliceLister
	functions     cache.GenericLister
	regions       cache.GenericLister
	synced        []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[key]
	cel   *cel.Cache

	startOnce sync.Once
}

// New creates a Controller and registers its informers; nothing runs until
// Run.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	switch {
	case cfg.DriverName == "":
		return nil, errors.New("controller config: DriverName is required: the DRA driver's name, e.g. fpga.dra.dev")
	case cfg.KubeClient == nil:
		return nil, errors.New("controller config: KubeClient is required")
	case cfg.DynamicClient == nil:
		return nil, errors.New("controller config: DynamicClient is required")
	}
	c := &Controller{
		driverName:             cfg.DriverName,
		extendedResourceDomain: cfg.ExtendedResourceDomain,
		kube:                   cfg.KubeClient,
		dynamic:                cfg.DynamicClient,
		metrics:                cfg.Metrics,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "fpga_dra_controller"}),
		cel: cel.NewCache(64, cel.Features{}),
	}
	kubeInformers := informers.NewSharedInformerFactory(cfg.KubeClient, cfg.ResyncPeriod)
	// Only this driver's slices: the API server filters by spec.driver.
	sliceInformers := informers.NewSharedInformerFactoryWithOptions(cfg.KubeClient, cfg.ResyncPeriod,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, cfg.DriverName).String()
		}))
	dynamicInformers := dynamicinformer.NewDynamicSharedInformerFactory(cfg.DynamicClient, cfg.ResyncPeriod)
	c.factories = []factory{kubeInformers, sliceInformers, dynamicInformers}

	classInformer := kubeInformers.Resource().V1().DeviceClasses()
	c.classInformer = classInformer.Informer()
	if err := c.classInformer.AddIndexers(cache.Indexers{ownerIndex: indexByOwner}); err != nil {
		return nil, fmt.Errorf("index DeviceClasses by owner: %w", err)
	}
	c.classes = classInformer.Lister()

	slices := sliceInformers.Resource().V1().ResourceSlices()
	c.slices = slices.Lister()

	functions := dynamicInformers.ForResource(v1alpha1.AcceleratorFunctionsResource)
	regions := dynamicInformers.ForResource(v1alpha1.FpgaRegionsResource)
	c.functions, c.regions = functions.Lister(), regions.Lister()

	logger := klog.FromContext(ctx)
	for _, reg := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{functions.Informer(), c.objectHandler(v1alpha1.AcceleratorFunctionKind)},
		{regions.Informer(), c.objectHandler(v1alpha1.FpgaRegionKind)},
		{c.classInformer, cache.ResourceEventHandlerFuncs{
			AddFunc:    c.classChanged,
			UpdateFunc: func(_, obj any) { c.classChanged(obj) },
			DeleteFunc: c.classChanged,
		}},
		{slices.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.enqueueAll(logger) },
			UpdateFunc: func(any, any) { c.enqueueAll(logger) },
			DeleteFunc: func(any) { c.enqueueAll(logger) },
		}},
	} {
		reg, err := reg.informer.AddEventHandler(reg.handler)
		if err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	return c, nil
}

// Run starts the informers, waits for their caches, then reconciles with
// workers goroutines until ctx is done. It returns nil after ctx is done,
// or an error when the caches never sync.
func (c *Controller) Run(ctx context.Context, workers int) error {
	logger := klog.FromContext(ctx)
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()

	c.start(ctx)
	logger.Info("Waiting for informer caches", "driver", c.driverName)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("informer caches did not sync: %w", context.Cause(ctx))
	}
	logger.Info("Reconciling AcceleratorFunctions and FpgaRegions", "workers", workers)
	reconcile.Run(ctx, c.queue, workers, c.syncLogged, c.failed)
	for _, f := range c.factories {
		f.Shutdown()
	}
	return nil
}

// HasSynced reports whether every informer cache has synced: the
// controller's readiness.
func (c *Controller) HasSynced() bool {
	for _, synced := range c.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// start starts the informers once.
func (c *Controller) start(ctx context.Context) {
	c.startOnce.Do(func() {
		for _, f := range c.factories {
			f.Start(ctx.Done())
		}
	})
}

// syncLogged syncs k with the key in the logger.
func (c *Controller) syncLogged(ctx context.Context, k key) error {
	return c.sync(klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "kind", k.kind, "name", k.name)), k)
}

// failed logs a failed reconcile, which is retried with backoff.
func (c *Controller) failed(ctx context.Context, k key, err error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "kind", k.kind, "name", k.name)
	if apierrors.IsConflict(err) {
		// Written from an older cache copy: the newer object is on its
		// way and this key comes back with it.
		logger.V(3).Info("Object changed meanwhile; retrying", "err", err)
		return
	}
	logger.Error(err, "Reconcile failed; retrying", "retries", c.queue.NumRequeues(k))
}

// sync reconciles the object k names, whether it exists or not.
func (c *Controller) sync(ctx context.Context, k key) error {
	start := time.Now()
	var err error
	switch k.kind {
	case v1alpha1.AcceleratorFunctionKind:
		err = c.syncAcceleratorFunction(ctx, k.name)
	case v1alpha1.FpgaRegionKind:
		err = c.syncFpgaRegion(ctx, k.name)
	default:
		err = fmt.Errorf("unknown kind %q", k.kind)
	}
	c.metrics.observe(k.kind, start, err)
	return err
}

// objectHandler enqueues the AcceleratorFunction or FpgaRegion an event is
// about and, for an AcceleratorFunction created, deleted or changed in its
// spec or deletion, the functions that share its old or new IDs: which of
// them serves the extended resource name may change with it
// (extendedResourceDomainOf).
func (c *Controller) objectHandler(kind string) cache.ResourceEventHandler {
	enqueue := func(obj any, siblings bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if o, ok := obj.(metav1.Object); ok {
			c.queue.Add(key{kind: kind, name: o.GetName()})
		}
		if siblings && kind == v1alpha1.AcceleratorFunctionKind {
			c.enqueueSharingIDs(obj)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { enqueue(obj, true) },
		UpdateFunc: func(old, obj any) {
			o, n := old.(metav1.Object), obj.(metav1.Object)
			changed := o.GetGeneration() != n.GetGeneration() || (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)
			enqueue(obj, changed)
			if changed {
				enqueue(old, true)
			}
		},
		DeleteFunc: func(obj any) { enqueue(obj, true) },
	}
}

// classChanged enqueues the owner of a DeviceClass and every object that
// would want a class of its name: a class deleted or released by one owner
// may resolve another's name conflict.
func (c *Controller) classChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	class, ok := obj.(*resourceapi.DeviceClass)
	if !ok {
		return
	}
	if k, ok := ownerKey(class); ok {
		c.queue.Add(k)
	}
	c.queue.Add(key{kind: v1alpha1.AcceleratorFunctionKind, name: class.Name})
	c.queue.Add(key{kind: v1alpha1.FpgaRegionKind, name: class.Name})
	// A conflict over a function's class name, come or gone, changes
	// which of the functions of its IDs serves the extended resource name.
	if af, err := c.functions.Get(class.Name); err == nil {
		c.enqueueSharingIDs(af)
	}
	if name, ok := strings.CutSuffix(class.Name, v1alpha1.ProgramClassSuffix); ok {
		c.queue.Add(key{kind: v1alpha1.AcceleratorFunctionKind, name: name})
	}
}

// enqueueAll enqueues every AcceleratorFunction and FpgaRegion: the devices
// they count changed.
func (c *Controller) enqueueAll(logger klog.Logger) {
	for _, l := range []struct {
		kind   string
		lister cache.GenericLister
	}{{v1alpha1.AcceleratorFunctionKind, c.functions}, {v1alpha1.FpgaRegionKind, c.regions}} {
		objs, err := l.lister.List(labelsEverything)
		if err != nil {
			logger.Error(err, "List from the informer cache", "kind", l.kind)
			continue
		}
		for _, obj := range objs {
			if o, ok := obj.(metav1.Object); ok {
				c.queue.Add(key{kind: l.kind, name: o.GetName()})
			}
		}
	}
}

// factory is what the controller does with an informer factory.
type factory interface {
	Start(stop <-chan struct{})
	Shutdown()
}

// labelsEverything selects every object of a lister.
var labelsEverything = labels.Everything()

// resourceOf returns the resource of a kind this controller reconciles.
func resourceOf(kind string) schema.GroupVersionResource {
	if kind == v1alpha1.FpgaRegionKind {
		return v1alpha1.FpgaRegionsResource
	}
	return v1alpha1.AcceleratorFunctionsResource
}
