package localcluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProbeView is what the probe container printed: its character devices
// ("/dev/dfl-port.0" -> "511:0") and FPGA environment.
type ProbeView struct {
	Devices map[string]string
	Env     map[string]string
	// Metadata maps the device metadata files the container has to
	// their JSON.
	Metadata map[string]string
}

// WaitPodRunning waits until the pod runs, or fails with the pod's last
// events when it does not within timeout.
func (c *Cluster) WaitPodRunning(ctx context.Context, ns, name string, timeout time.Duration) (*corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pod.Status.Phase == corev1.PodRunning {
			return pod, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pod %s/%s not running after %s (%v); events: %s", ns, name, timeout, phase(pod, err), c.Events(ctx, ns, name))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func phase(pod *corev1.Pod, err error) string {
	if err != nil {
		return err.Error()
	}
	return string(pod.Status.Phase)
}

// Events returns the messages of the events about an object, oldest first.
func (c *Cluster) Events(ctx context.Context, ns, name string) string {
	list, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
	}
	return strings.Join(out, " | ")
}

// ReadProbe reads the probe container's report from its log file in the
// kubelet's pod log directory (kubectl logs needs a node address the local
// node does not have).
func (c *Cluster) ReadProbe(ctx context.Context, pod *corev1.Pod, container string, timeout time.Duration) (*ProbeView, error) {
	path := filepath.Join(c.PodLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container, "0.log")
	deadline := time.Now().Add(timeout)
	for {
		if v, ok := parseProbeLog(path); ok {
			return v, nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			return nil, fmt.Errorf("no complete probe report in %s after %s; log: %q", path, timeout, b)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// parseProbeLog reads CRI log lines ("<time> stdout F <text>") between the
// probe's markers.
func parseProbeLog(path string) (*ProbeView, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	v := &ProbeView{Devices: map[string]string{}, Env: map[string]string{}, Metadata: map[string]string{}}
	in, done := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) < 4 {
			continue
		}
		text := parts[3]
		switch {
		case text == "FPGA-PROBE-BEGIN":
			in = true
		case text == "FPGA-PROBE-END":
			done = in
		case in && strings.HasPrefix(text, "dev="):
			dev, nums, _ := strings.Cut(strings.TrimPrefix(text, "dev="), " ")
			v.Devices[dev] = nums
		case in && strings.HasPrefix(text, "meta="):
			path, doc, _ := strings.Cut(strings.TrimPrefix(text, "meta="), " ")
			v.Metadata[path] = doc
		case in && strings.HasPrefix(text, "env="):
			k, val, _ := strings.Cut(strings.TrimPrefix(text, "env="), "=")
			v.Env[k] = val
		}
	}
	return v, done
}
