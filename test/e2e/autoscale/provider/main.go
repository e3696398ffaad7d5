// Command provider is Karpenter core (sigs.k8s.io/karpenter) with its kwok
// cloud provider, unchanged but for one thing: every instance type whose
// entry in the kwok instance-types file (--instance-types-file-path) has an
// "fpga" node shape gets InstanceType.DynamicResources from package
// slicetemplate, the devices the FPGA DRA driver will publish on such a
// node. With --ignore-dra-requests=false Karpenter then launches FPGA nodes
// for pending claims from zero. The end-to-end tests of test/e2e/autoscale
// run it; hack/e2e/build-autoscaler-binaries.sh builds it.
//
// An instance-types entry with a shape (the other fields are kwok's):
//
//	{"name": "fpga-a10-2x", ..., "fpga": {"model": "pac-a10", "cards": 2, "interfaceID": "69528db6eb31577a8c3668f9faa081f6"}}
package main

import (
	"github.com/samber/lo"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	kwokoptions "sigs.k8s.io/karpenter/kwok/options"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
)

// main is kwok's main (sigs.k8s.io/karpenter/kwok/main.go at v1.15.0) with
// the instance types decorated, and a failure to build them fatal.
func main() {
	ctx, op := operator.NewOperator()
	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed constructing instance types")
		panic(err)
	}
	if err := addFPGADevices(kwokoptions.FromContext(ctx).InstanceTypesFilePath, instanceTypes); err != nil {
		log.FromContext(ctx).Error(err, "failed adding FPGA devices to instance types")
		panic(err)
	}

	overlayUndecoratedCloudProvider := kwok.NewCloudProvider(ctx, op.GetClient(), instanceTypes)
	cloudProvider := overlay.Decorate(overlayUndecoratedCloudProvider, op.GetClient(), op.InstanceTypeStore)
	repairPolicyMatcher := lo.Must(health.NewRepairPolicyMatcher(ctx, cloudProvider))
	clusterState := state.NewCluster(op.Clock, op.GetClient(), cloudProvider, state.WithRepairPolicyMatcher(repairPolicyMatcher))
	op.
		WithControllers(ctx, controllers.NewControllers(
			ctx,
			op.Manager,
			op.Clock,
			op.GetClient(),
			op.EventRecorder,
			cloudProvider,
			overlayUndecoratedCloudProvider,
			clusterState,
			op.InstanceTypeStore,
			op.PredictionStore,
		)...).Start(ctx)
}
