package autoscale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/fpga-dra/fpga-dra-driver/pkg/slicetemplate"
	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

// kwokAnnotation marks the nodes the kwok controller plays the kubelet of
// (the kwok cloud provider sets it on every node it creates).
const kwokAnnotation = "kwok.x-k8s.io/node"

// nodeAgents stands in for the driver's DaemonSet on kwok's fake nodes:
// for every node kwok manages it writes the simulated FPGA tree of the
// node's instance type (an empty one for a type without FPGAs) and runs
// `fpga-dra-driver run` for the node, in simulation mode; when the node is
// deleted its driver stops, as the DaemonSet's pod would go with the node.
// A fake node has no kubelet: the driver's registration socket is never
// dialled and no claim is ever prepared there, but it publishes its slice
// through the API server as on a real node.
type nodeAgents struct {
	c      *localcluster.Cluster
	bin    string
	shapes map[string]slicetemplate.Shape // by instance type
	stopCh chan struct{}
	done   sync.WaitGroup

	mu      sync.Mutex
	n       int
	running map[string]*localcluster.Process // by node name
	started map[string]time.Time             // when the driver started, by node name
	err     error                            // the first failure to start a driver
}

func startAgents(ctx context.Context, c *localcluster.Cluster, bin string, shapes map[string]slicetemplate.Shape) (*nodeAgents, error) {
	a := &nodeAgents{c: c, bin: bin, shapes: shapes, stopCh: make(chan struct{}),
		running: map[string]*localcluster.Process{}, started: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactory(c.Client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { a.nodeAdded(obj.(*corev1.Node)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				a.nodeDeleted(n.Name)
			}
		},
	}); err != nil {
		return nil, err
	}
	a.done.Add(1)
	go func() {
		defer a.done.Done()
		nodes.Run(a.stopCh)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		a.stop()
		return nil, fmt.Errorf("node informer did not sync: %w", ctx.Err())
	}
	return a, nil
}

func (a *nodeAgents) nodeAdded(node *corev1.Node) {
	if node.Annotations[kwokAnnotation] == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.startDriver(node); err != nil && a.err == nil {
		a.err = fmt.Errorf("start the driver for node %s: %w", node.Name, err)
	}
}

// startDriver writes the node's simulated tree and starts its driver.
// Directories are numbered, not named after the node: a unix socket path
// has at most 108 bytes.
func (a *nodeAgents) startDriver(node *corev1.Node) error {
	a.n++
	dir := filepath.Join(a.c.Dir, fmt.Sprintf("n%d", a.n))
	root := filepath.Join(dir, "root")
	if shape, ok := a.shapes[node.Labels[corev1.LabelInstanceTypeStable]]; ok {
		if _, err := slicetemplate.WriteNode(root, shape); err != nil {
			return err
		}
	}
	for _, d := range []string{root, filepath.Join(dir, "bitstreams")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	p, err := a.c.Start("fpga-dra-driver-"+node.Name, a.bin, []string{
		"run", "--mode=dra",
		"--kubeconfig", a.c.AdminKubeconfig,
		"--node-name", node.Name,
		"--root", root,
		"--registrar-dir", filepath.Join(dir, "registry"),
		"--plugin-dir", filepath.Join(dir, "plugin"),
		"--cdi-dir", filepath.Join(dir, "cdi"),
		"--bitstream-dir", filepath.Join(dir, "bitstreams"),
		"--pod-resources-socket", filepath.Join(dir, "pod-resources.sock"),
		"--programmer", "sim",
		"--uevent-source", "none",
		"--refresh-interval", "5s",
		"-v", "2",
	}, nil)
	if err != nil {
		return err
	}
	a.running[node.Name] = p
	a.started[node.Name] = time.Now()
	return nil
}

func (a *nodeAgents) nodeDeleted(name string) {
	a.mu.Lock()
	p := a.running[name]
	delete(a.running, name)
	a.mu.Unlock()
	if p != nil {
		p.Stop(20 * time.Second)
	}
}

// startedAt reports when the driver of node started.
func (a *nodeAgents) startedAt(node string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.started[node]
	return t, ok
}

// failed returns the first failure to start a driver.
func (a *nodeAgents) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// driver returns the running driver of node (nil when none runs).
func (a *nodeAgents) driver(node string) *localcluster.Process {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running[node]
}

// stop ends the informer and every driver it started.
func (a *nodeAgents) stop() {
	select {
	case <-a.stopCh:
		return
	default:
	}
	close(a.stopCh)
	a.done.Wait()
	a.mu.Lock()
	running := a.running
	a.running = map[string]*localcluster.Process{}
	a.mu.Unlock()
	for _, p := range running {
		p.Stop(20 * time.Second)
	}
}
