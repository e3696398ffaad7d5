package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
)

// discoveryServing returns a fake API server discovery that serves the
// given group versions.
func discoveryServing(groupVersions ...string) *fakediscovery.FakeDiscovery {
	client := fake.NewClientset()
	disc := client.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = nil
	for _, gv := range groupVersions {
		disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "things"}}})
	}
	return disc
}

func TestResolveModeAuto(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, tc := range []struct {
		name          string
		groupVersions []string
		want          string
	}{
		{"DRA GA", []string{"v1", "apps/v1", "resource.k8s.io/v1"}, modeDRA},
		{"DRA beta only", []string{"v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"}, modeDRA},
		{"no DRA", []string{"v1", "apps/v1", "node.k8s.io/v1"}, modeDevicePlugin},
		{"a group that only looks alike", []string{"v1", "resource.k8s.io.example.com/v1"}, modeDevicePlugin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []string{modeAuto, ""} {
				got, why, err := resolveMode(ctx, mode, discoveryServing(tc.groupVersions...))
				if err != nil || got != tc.want || why == "" {
					t.Errorf("resolveMode(%q) = %q (%s), %v; want %q with a reason", mode, got, why, err, tc.want)
				}
			}
		})
	}
}

func TestResolveModeExplicit(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	disc := discoveryServing("resource.k8s.io/v1")
	for _, mode := range []string{modeDRA, modeDevicePlugin} {
		if got, _, err := resolveMode(ctx, mode, disc); err != nil || got != mode {
			t.Errorf("resolveMode(%q) = %q, %v", mode, got, err)
		}
	}
	if _, _, err := resolveMode(ctx, "both", disc); err == nil {
		t.Error("resolveMode(both) succeeded, want an error")
	}
	// auto fails clearly when the API server cannot be asked.
	disc.PrependReactor("get", "group", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, _, err := resolveMode(ctx, modeAuto, disc); err == nil || !strings.Contains(err.Error(), "--mode=dra") {
		t.Errorf("resolveMode(auto) with an unreachable API server = %v, want an error suggesting an explicit mode", err)
	}
}

func TestDevicePluginMode(t *testing.T) {
	node := func(annotations map[string]string) *fake.Clientset {
		return fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Annotations: annotations}})
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		flag        string
		want        deviceplugin.Mode
		wantWhy     string
	}{
		{"flag", nil, "region", deviceplugin.ModeRegion, "--device-plugin-mode"},
		{"own annotation", map[string]string{"fpga.dra.dev/device-plugin-mode": "region"}, "af", deviceplugin.ModeRegion, "fpga.dra.dev/device-plugin-mode"},
		{"Intel annotation", map[string]string{"fpga.intel.com/device-plugin-mode": "af"}, "region", deviceplugin.ModeAF, "fpga.intel.com/device-plugin-mode"},
		{"own annotation wins", map[string]string{"fpga.intel.com/device-plugin-mode": "af", "fpga.dra.dev/device-plugin-mode": "region"}, "af", deviceplugin.ModeRegion, "fpga.dra.dev/device-plugin-mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, err := devicePluginMode(ctx, node(tc.annotations), "worker-1", tc.flag)
			if err != nil || got != tc.want || !strings.Contains(why, tc.wantWhy) {
				t.Errorf("devicePluginMode = %q (%s), %v; want %q from %s", got, why, err, tc.want, tc.wantWhy)
			}
		})
	}
	if _, _, err := devicePluginMode(ctx, node(map[string]string{"fpga.intel.com/device-plugin-mode": "devel"}), "worker-1", "af"); err == nil || !strings.Contains(err.Error(), "fpga.intel.com/device-plugin-mode") {
		t.Errorf("invalid annotation: %v, want an error naming it", err)
	}
	if _, _, err := devicePluginMode(ctx, node(nil), "worker-1", "both"); err == nil {
		t.Error("invalid flag accepted")
	}
	if _, _, err := devicePluginMode(ctx, node(nil), "worker-2", "af"); err == nil {
		t.Error("missing node accepted")
	}
}

// hangingDiscovery is an API server that never answers.
type hangingDiscovery struct{ release chan struct{} }

func (h hangingDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	<-h.release
	return nil, errors.New("released")
}

// TestResolveModeUnanswered: when the API server does not answer, the
// check ends with its context (the start-up deadline, or a stop) and says
// how to skip it.
func TestResolveModeUnanswered(t *testing.T) {
	h := hangingDiscovery{release: make(chan struct{})}
	defer close(h.release)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("the API server did not answer within 30s"))
	_, _, err := resolveMode(ctx, modeAuto, h)
	if err == nil {
		t.Fatal("resolveMode returned no error for an API server that never answered")
	}
	for _, want := range []string{"did not answer within 30s", "--mode=dra", "--mode=device-plugin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
