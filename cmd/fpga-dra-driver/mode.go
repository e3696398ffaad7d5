package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sdiscovery "k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Daemon modes (--mode). The daemon serves one API at a time, so a device
// is never offered through both.
const (
	modeAuto         = "auto"
	modeDRA          = "dra"
	modeDevicePlugin = "device-plugin"
)

// resourceGroup is the API group whose presence means the cluster has DRA.
const resourceGroup = "resource.k8s.io"

// Node annotations that override --device-plugin-mode on one node: this
// driver's, then the Intel FPGA device plugin's, so nodes annotated for
// that plugin keep their mode.
var devicePluginModeAnnotations = []string{
	v1alpha1.DriverName + "/device-plugin-mode",
	"fpga.intel.com/device-plugin-mode",
}

// modeCheckTimeout bounds --mode=auto's question to the API server.
const modeCheckTimeout = 30 * time.Second

// resolveMode turns --mode into modeDRA or modeDevicePlugin and says why.
// auto asks the API server's discovery whether it serves resource.k8s.io
// in any version.
func resolveMode(ctx context.Context, mode string, disc k8sdiscovery.ServerGroupsInterface) (string, string, error) {
	switch mode {
	case modeDRA, modeDevicePlugin:
		return mode, "--mode=" + mode, nil
	case modeAuto, "":
	default:
		return "", "", fmt.Errorf("--mode %q is not one of %s, %s, %s", mode, modeAuto, modeDRA, modeDevicePlugin)
	}
	// ServerGroups takes no context: do not let an API server that does
	// not answer hold up a shutdown.
	type answer struct {
		groups *metav1.APIGroupList
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		groups, err := disc.ServerGroups()
		answered <- answer{groups, err}
	}()
	var groups *metav1.APIGroupList
	var err error
	select {
	case <-ctx.Done():
		return "", "", fmt.Errorf("--mode=auto: ask the API server which API groups it serves: %w (pass --mode=%s or --mode=%s to skip the check)", context.Cause(ctx), modeDRA, modeDevicePlugin)
	case a := <-answered:
		groups, err = a.groups, a.err
	}
	if err != nil {
		return "", "", fmt.Errorf("--mode=auto: ask the API server which API groups it serves: %w (pass --mode=%s or --mode=%s to skip the check)", err, modeDRA, modeDevicePlugin)
	}
	for _, g := range groups.Groups {
		if g.Name != resourceGroup || len(g.Versions) == 0 {
			continue
		}
		versions := make([]string, len(g.Versions))
		for i, v := range g.Versions {
			versions[i] = v.Version
		}
		return modeDRA, fmt.Sprintf("the API server serves %s (%s)", resourceGroup, strings.Join(versions, ", ")), nil
	}
	klog.FromContext(ctx).V(2).Info("API groups served", "count", len(groups.Groups))
	return modeDevicePlugin, fmt.Sprintf("the API server does not serve %s: the cluster has no DRA", resourceGroup), nil
}

// devicePluginMode is the node's device-plugin mode: a node annotation
// (see devicePluginModeAnnotations) or else the flag. A value other than af
// or region is an error, not a silent fallback.
func devicePluginMode(ctx context.Context, client kubernetes.Interface, nodeName, flag string) (deviceplugin.Mode, string, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("read node %s for its %s annotation (the daemon needs get on nodes): %w", nodeName, devicePluginModeAnnotations[0], err)
	}
	for _, key := range devicePluginModeAnnotations {
		v, ok := node.Annotations[key]
		if !ok {
			continue
		}
		m, err := deviceplugin.ParseMode(strings.TrimSpace(v))
		if err != nil {
			return "", "", fmt.Errorf("node %s annotation %s: %w: fix or remove the annotation", nodeName, key, err)
		}
		return m, "node annotation " + key, nil
	}
	m, err := deviceplugin.ParseMode(flag)
	if err != nil {
		return "", "", fmt.Errorf("--device-plugin-mode: %w", err)
	}
	return m, "--device-plugin-mode", nil
}

// startDevicePlugin starts the legacy endpoint on the node's shared state:
// it resolves the node's device-plugin mode and, in region mode with CDI,
// writes the programming hook's CDI spec first.
func startDevicePlugin(ctx context.Context, f runFlags, client kubernetes.Interface, st *state.State, scanner *discovery.Scanner, events *discovery.UeventSource) (*deviceplugin.Plugin, error) {
	logger := klog.FromContext(ctx)
	mode, why, err := devicePluginMode(ctx, client, f.nodeName, f.devicePluginMode)
	if err != nil {
		return nil, err
	}
	logger.Info("Device-plugin mode selected", "deviceMode", mode, "reason", why)
	var hook string
	switch {
	case mode == deviceplugin.ModeRegion && f.cdi:
		bin := f.hookPath
		if bin == "" {
			if bin, err = os.Executable(); err != nil {
				return nil, fmt.Errorf("find this program's path for the programming hook (pass --hook-path): %w", err)
			}
		}
		if hook, err = deviceplugin.WriteHookSpec(deviceplugin.HookSpec{Vendor: f.driverName, Dir: f.cdiDir, Binary: bin, ControlSocket: f.controlSocket}); err != nil {
			return nil, err
		}
		logger.Info("Region programming hook installed as a CDI device", "device", hook, "binary", bin, "controlSocket", f.controlSocket)
	case mode == deviceplugin.ModeRegion:
		logger.Info("WARNING: region mode without CDI: containers are programmed only if the container runtime runs `fpga-dra-driver hook` as a createRuntime (or prestart) hook, e.g. through CRI-O's hooks.d", "controlSocket", f.controlSocket)
	}
	return deviceplugin.Start(ctx, deviceplugin.Config{
		Domain:          f.resourceDomain,
		Mode:            mode,
		Dir:             f.devicePluginsDir,
		Scanner:         scanner,
		Events:          events,
		RefreshInterval: f.refreshInterval,
		State:           st,
		CDI:             f.cdi,
		HookDevice:      hook,
	})
}

// kubeletPluginsDir holds the data directory of each kubelet plugin,
// named after its driver.
const kubeletPluginsDir = "/var/lib/kubelet/plugins"

// defaultPluginDir is the plugin data directory of the driver driverName.
func defaultPluginDir(driverName string) string {
	return filepath.Join(kubeletPluginsDir, driverName)
}

// defaultControlSocket is the control socket in the plugin directory.
func defaultControlSocket(pluginDir string) string {
	return filepath.Join(pluginDir, "control.sock")
}
