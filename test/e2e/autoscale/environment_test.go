package autoscale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/controller"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/slicetemplate"
	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

const (
	driverName = v1alpha1.DriverName
	// regionClass selects programmable regions with the simulated
	// interface ID, as an FpgaRegion's DeviceClass does.
	regionClass = "pac-a10-region"
	nodePool    = "fpga"
	// otherInterfaceID is the FIM of the cheaper FPGA instance type, whose
	// regions regionClass does not select.
	otherInterfaceID = "0123456789abcdef0123456789abcdef"
)

var (
	nodeClaimsResource = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}
	nodePoolsResource  = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
)

// kwokInstanceType is an entry of the kwok provider's instance-types file;
// FPGA is what test/e2e/autoscale/provider reads.
type kwokInstanceType struct {
	Name             string               `json:"name"`
	Offerings        []kwokOffering       `json:"offerings"`
	Architecture     string               `json:"architecture"`
	OperatingSystems []string             `json:"operatingSystems"`
	Resources        corev1.ResourceList  `json:"resources"`
	FPGA             *slicetemplate.Shape `json:"fpga,omitempty"`
}

type kwokOffering struct {
	Price        float64                          `json:"Price"`
	Available    bool                             `json:"Available"`
	Requirements []corev1.NodeSelectorRequirement `json:"Requirements"`
}

// instanceTypes: the cheapest has no FPGA; the cheaper FPGA type carries a
// card whose region has another interface ID; only the dearest one has
// what regionClass selects (two PAC Arria 10 cards). A Karpenter that did
// not simulate the devices would launch one of the cheaper ones.
func instanceTypes() []kwokInstanceType {
	it := func(name string, price float64, cpu string, fpga *slicetemplate.Shape) kwokInstanceType {
		return kwokInstanceType{
			Name: name, Architecture: "amd64", OperatingSystems: []string{"linux"},
			Resources: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("32Gi"),
				corev1.ResourcePods: resource.MustParse("110"),
			},
			Offerings: []kwokOffering{{Price: price, Available: true, Requirements: []corev1.NodeSelectorRequirement{
				{Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"test-zone-a"}},
			}}},
			FPGA: fpga,
		}
	}
	return []kwokInstanceType{
		it("plain-8x", 0.2, "8", nil),
		it("fpga-d5005-1x", 1.0, "8", &slicetemplate.Shape{Model: "pac-d5005", Cards: 1, InterfaceID: otherInterfaceID}),
		it("fpga-a10-2x", 2.0, "8", &slicetemplate.Shape{Model: "pac-a10", Cards: 2, InterfaceID: simnode.DefaultInterfaceID}),
	}
}

// fpgaInstanceType is the one instance type that can serve regionClass.
const fpgaInstanceType = "fpga-a10-2x"

// environment is what runs beside the control plane.
type environment struct {
	c         *localcluster.Cluster
	bin       string // the autoscaler binaries
	dyn       dynamic.Interface
	karpenter *localcluster.Process
	agents    *nodeAgents
	shapes    map[string]slicetemplate.Shape
}

// start brings up, on the control plane c, the kwok controller, Karpenter,
// the NodePool and the DeviceClass, and the driver's DaemonSet stand-in.
func start(ctx context.Context, c *localcluster.Cluster, repo, bin string) (*environment, error) {
	e := &environment{c: c, bin: bin, shapes: map[string]slicetemplate.Shape{}}
	for _, it := range instanceTypes() {
		if it.FPGA != nil {
			e.shapes[it.Name] = *it.FPGA
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		return nil, err
	}
	if e.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return nil, err
	}
	driverBin := filepath.Join(c.Dir, "fpga-dra-driver")
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"fpga-dra-driver build", func(ctx context.Context) error {
			build := exec.CommandContext(ctx, "go", "build", "-o", driverBin, "./cmd/fpga-dra-driver")
			build.Dir = repo
			if b, err := build.CombinedOutput(); err != nil {
				return fmt.Errorf("%w\n%s", err, b)
			}
			return nil
		}},
		// The controller routes allocated claims to their nodes, where
		// the driver programs them before binding (binding conditions,
		// on by default), as the chart installs it beside the
		// DaemonSet.
		{"fpga-dra-controller", func(ctx context.Context) error {
			_, err := c.StartController(ctx, filepath.Join(repo, "deployments/helm/fpga-dra-driver/crds"))
			return err
		}},
		{"Karpenter's CRDs", e.applyCRDs},
		{"kwok controller", e.startKwok},
		{"Karpenter", e.startKarpenter},
		{"NodePool, KWOKNodeClass and DeviceClass", e.applyObjects},
		{"driver DaemonSet stand-in", func(ctx context.Context) error {
			e.agents, err = startAgents(ctx, c, driverBin, e.shapes)
			return err
		}},
	}
	for _, s := range steps {
		begin := time.Now()
		if err := s.fn(ctx); err != nil {
			return e, fmt.Errorf("%s: %w", s.name, err)
		}
		logf("%s ready in %s", s.name, time.Since(begin).Round(10*time.Millisecond))
	}
	return e, nil
}

func (e *environment) applyCRDs(ctx context.Context) error {
	if err := e.c.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(e.bin, "crds")); err != nil {
		return err
	}
	return e.c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh", "crd/nodeoverlays.karpenter.sh", "crd/kwoknodeclasses.karpenter.kwok.sh")
}

func (e *environment) startKwok(ctx context.Context) error {
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return err
	}
	p, err := e.c.Start("kwok", filepath.Join(e.bin, "kwok"), []string{
		"--kubeconfig", e.c.AdminKubeconfig, "--config", filepath.Join(e.bin, "kwok.yaml"),
		"--server-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
	}, nil)
	if err != nil {
		return err
	}
	return e.c.WaitHTTP(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[0]))
}

func (e *environment) startKarpenter(ctx context.Context) error {
	b, err := json.MarshalIndent(instanceTypes(), "", "  ")
	if err != nil {
		return err
	}
	file := filepath.Join(e.c.Dir, "instance-types.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return err
	}
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		return err
	}
	e.karpenter, err = e.c.Start("karpenter", filepath.Join(e.bin, "karpenter"), []string{
		"--disable-leader-election=true",
		"--metrics-port", fmt.Sprint(ports[0]), "--health-probe-port", fmt.Sprint(ports[1]),
		// DRA simulation on: claims are allocated against the instance
		// types' DynamicResources and the cluster's slices.
		"--ignore-dra-requests=false",
		"--instance-types-file-path", file,
	}, []string{"KUBECONFIG=" + e.c.AdminKubeconfig, "SYSTEM_NAMESPACE=kube-system"})
	if err != nil {
		return err
	}
	return e.c.WaitHTTP(ctx, e.karpenter, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]))
}

// applyObjects creates the KWOKNodeClass, a NodePool that consolidates
// empty nodes at once, and the DeviceClass, and waits for the NodePool to
// be Ready.
func (e *environment) applyObjects(ctx context.Context) error {
	manifest := fmt.Sprintf(`apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata:
  name: default
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: %s
spec:
  template:
    spec:
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      expireAfter: Never
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 0s
`, nodePool)
	file := filepath.Join(e.c.Dir, "nodepool.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		return err
	}
	if err := e.c.Kubectl(ctx, "apply", "-f", file); err != nil {
		return err
	}
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: regionClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: controller.ProgrammableSelector(driverName, simnode.DefaultInterfaceID),
		}}}},
	}
	if _, err := e.c.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return err
	}
	return e.c.WaitFor(ctx, e.karpenter, 60*time.Second, func() error {
		np, err := e.dyn.Resource(nodePoolsResource).Get(ctx, nodePool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conditions, _, _ := unstructured.NestedSlice(np.Object, "status", "conditions")
		for _, c := range conditions {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("NodePool %s not Ready: %v", nodePool, conditions)
	})
}
