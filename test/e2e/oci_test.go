package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/registrytest"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

// The AFUs of the OCI cases: loaded on no region and in no node's
// repository, so a region that carries one was programmed from a registry.
const (
	ociAFU      = "0c1b0000000000000000000000000001"
	ociOtherAFU = "0c1b0000000000000000000000000002"
	ociAuthAFU  = "0c1b0000000000000000000000000003"
	ociTLSAFU   = "0c1b0000000000000000000000000004"
)

// pushed is a bitstream pushed with the admin CLI.
type pushed struct {
	// Ref is the digest reference the CLI printed.
	Ref string
	// Layer is the sha256 of the file (the layer digest's hex).
	Layer string
}

// pushBitstream writes a simulated GBS for afu and pushes it to reg under
// repoTag with `fpga-dra-driver bitstream push`, the CLI an administrator
// runs, with flags (credentials, CA); a registry without TLS is reached over
// plain HTTP.
func pushBitstream(t testing.TB, reg *registrytest.Registry, afu, repoTag string, flags ...string) pushed {
	t.Helper()
	paths, err := program.WriteSimRepository(t.TempDir(), simnode.DefaultInterfaceID, []string{afu})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	args := append([]string{"bitstream", "push", "-o", "reference"}, flags...)
	if !reg.Config.TLS {
		args = append(args, "--insecure-registries", reg.Host)
	}
	cmd := exec.Command(node.Bin, append(args, paths[0], reg.Host+"/"+repoTag)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, stderr.String())
	}
	p := pushed{Ref: strings.TrimSpace(string(out)), Layer: hex.EncodeToString(sum[:])}
	if !strings.HasPrefix(p.Ref, reg.Host+"/"+repoTag+"@sha256:") {
		t.Fatalf("bitstream push printed %q, want the reference %s pinned by digest", p.Ref, repoTag)
	}
	return p
}

// setRegistryAccess gives the node's driver a (an upgrade of the chart
// release with new values) and waits until the new daemon runs.
func setRegistryAccess(t testing.TB, a localcluster.RegistryAccess) {
	t.Helper()
	start := time.Now()
	node.UseRegistry(a)
	if err := node.Reconfigure(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("the node's driver reaches registries over plain HTTP %v, with credentials: %t, with a CA: %t (after %s)",
		a.Insecure, len(a.Credentials) > 0, len(a.CA) > 0, time.Since(start).Round(time.Second))
}

// generatedClaim waits for the claim generated for a pod's template.
func generatedClaim(t testing.TB, ns, name string) *resourceapi.ResourceClaim {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, "pod "+name+" has its claim", 60*time.Second, func() bool {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				pod = p
				return true
			}
		}
		return false
	})
	return podClaim(t, pod)
}

// claimWarning waits until the driver records on the pod's claim a warning
// that contains every string of want, and returns it; the pod must not run.
func claimWarning(t testing.TB, ns, pod string, want ...string) string {
	t.Helper()
	claim := generatedClaim(t, ns, pod)
	deadline := time.Now().Add(90 * time.Second)
	for {
		warnings := claimEvents(t, claim, func(e eventsv1.Event) bool { return e.Type == corev1.EventTypeWarning })
		for _, note := range warnings {
			if containsAll(note, want) {
				p, err := cluster.Client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
				if err != nil || p.Status.Phase == corev1.PodRunning {
					t.Fatalf("pod %s runs despite %q (%v)", pod, note, err)
				}
				t.Logf("claim %s/%s: %s", ns, claim.Name, note)
				return note
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning on claim %s/%s with %q within 90s; its warnings: %q", ns, claim.Name, want, warnings)
		}
		time.Sleep(250 * time.Millisecond) // polling events another process records
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// programmedFrom waits for the pod and checks that its region was
// programmed with afu from ref: the container sees afu, the region reports
// it, and the claim's Programmed event names ref.
func programmedFrom(t testing.TB, ns, pod, afu, ref string) {
	t.Helper()
	view, device, claim := runningProbe(t, ns, pod)
	if view.Env["FPGA_AFU_IDS"] != afu {
		t.Fatalf("container sees AFU %q, want %s from %s", view.Env["FPGA_AFU_IDS"], afu, ref)
	}
	if b, err := os.ReadFile(filepath.Join(portOf(t, device).SysfsPath, "afu_id")); err != nil || strings.TrimSpace(string(b)) != afu {
		t.Fatalf("region afu_id %q (%v), want %s", b, err, afu)
	}
	eventually(t, "a Programmed event naming "+ref, 30*time.Second, func() bool {
		return len(claimEvents(t, claim, func(e eventsv1.Event) bool {
			return e.Reason == "Programmed" && strings.Contains(e.Note, "from "+ref)
		})) > 0
	})
}

// Test10BitstreamsFromOCIRegistries runs three real CNCF Distribution
// registries (anonymous plain HTTP, plain HTTP with a password, HTTPS with
// its own CA), pushes bitstreams with the admin CLI and has claims name them
// by digest. The node's registry access comes from the chart's values.
func Test10BitstreamsFromOCIRegistries(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	startWebhook(t) // every claim below passes admission as in a cluster
	const password = "e2e-registry-password"
	public := registrytest.Start(t, registrytest.Config{})
	private := registrytest.Start(t, registrytest.Config{User: "fpga", Password: password})
	tlsRegistry := registrytest.Start(t, registrytest.Config{TLS: true})
	credentials := private.CredentialsFile(t, password)
	loopback := pushBitstream(t, public, ociAFU, "accel/loopback:v1")
	other := pushBitstream(t, public, ociOtherAFU, "accel/other:v1")
	secret := pushBitstream(t, private, ociAuthAFU, "accel/private:v1", "--registry-config", credentials)
	ownCA := pushBitstream(t, tlsRegistry, ociTLSAFU, "accel/tls:v1", "--registry-ca-file", tlsRegistry.CAFile)

	// Plain HTTP to two registries; no credentials and no CA yet.
	t.Cleanup(func() {
		node.UseRegistry(localcluster.RegistryAccess{})
		if err := node.Reconfigure(context.Background()); err != nil {
			t.Errorf("restore the node's registry access: %v", err)
		}
	})
	setRegistryAccess(t, localcluster.RegistryAccess{Insecure: []string{public.Host, private.Host}})
	deviceClass(t, "e2e-oci", fmt.Sprintf("%s.interfaceID == %q && %s.programmable", attrs, simnode.DefaultInterfaceID, attrs))

	t.Run("pinned by digest: the region is programmed from the registry", func(t *testing.T) {
		ns := namespace(t, "e2e-oci-pull")
		claimTemplate(t, ns, "ref", "e2e-oci", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: ociAFU, BitstreamRef: loopback.Ref})))
		probePod(t, ns, "pulled", "ref")
		programmedFrom(t, ns, "pulled", ociAFU, loopback.Ref)
		if _, err := os.Stat(filepath.Join(node.CacheDir, "blobs", "sha256", loopback.Layer)); err != nil {
			t.Fatalf("the node's bitstream cache does not hold the pulled file: %v", err)
		}
	})

	t.Run("wrong digest: a clear error on the claim", func(t *testing.T) {
		ns := namespace(t, "e2e-oci-digest")
		// A common mistake: the file's (layer) digest instead of the manifest's.
		repo, _, _ := strings.Cut(loopback.Ref, "@")
		wrong := repo + "@sha256:" + loopback.Layer
		claimTemplate(t, ns, "wrong", "e2e-oci", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: ociAFU, BitstreamRef: wrong})))
		probePod(t, ns, "wrong-digest", "wrong")
		claimWarning(t, ns, "wrong-digest", "not found in the registry", "sha256:"+loopback.Layer, public.Host)
	})

	t.Run("tag without digest: refused at admission", func(t *testing.T) {
		tagRefusedAtAdmission(t, ctx, loopback)
	})

	t.Run("registry stopped: the cached copy is used, an uncached bitstream fails clearly", func(t *testing.T) {
		ns := namespace(t, "e2e-oci-down")
		public.Stop()
		// Always: program even a region that carries the function, so the
		// file must come from somewhere.
		claimTemplate(t, ns, "cached", "e2e-oci", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: ociAFU, BitstreamRef: loopback.Ref, Programming: v1alpha1.ProgrammingAlways})))
		claimTemplate(t, ns, "uncached", "e2e-oci", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: ociOtherAFU, BitstreamRef: other.Ref})))
		probePod(t, ns, "cached", "cached")
		probePod(t, ns, "uncached", "uncached")
		programmedFrom(t, ns, "cached", ociAFU, loopback.Ref)
		claimWarning(t, ns, "uncached", "registry unreachable", public.Host)
	})

	t.Run("password and own CA: refused without, programmed once the node has the credentials and the CA", func(t *testing.T) {
		registryAccessFromNode(t, ctx, public, private, tlsRegistry, credentials, secret, ownCA)
	})
}

// tagRefusedAtAdmission checks a claim and an AcceleratorFunction naming
// loopback by tag alone are refused, naming the field and the digest.
func tagRefusedAtAdmission(t *testing.T, ctx context.Context, loopback pushed) {
	ns := namespace(t, "e2e-oci-tag")
	tag, _, _ := strings.Cut(loopback.Ref, "@")
	err := createConfiguredClaim(ns, "tag", driverName,
		fmt.Sprintf(`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":%q,"bitstreamRef":%q}`, ociAFU, tag))
	if err == nil || !containsAll(err.Error(), []string{"denied", "spec.devices.config[0].opaque.parameters.bitstreamRef", "has no digest"}) {
		t.Fatalf("a claim naming the tag %s: %v, want a refusal naming the field and the missing digest", tag, err)
	}
	af := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "AcceleratorFunction",
		"metadata": map[string]any{"name": "e2e-oci-tag"},
		"spec":     map[string]any{"afuID": ociAFU, "interfaceID": simnode.DefaultInterfaceID, "mode": "region", "bitstreamRef": tag},
	}}
	afs := acceleratorFunctions(t)
	if _, err := afs.Create(ctx, af, metav1.CreateOptions{}); err == nil || !containsAll(err.Error(), []string{"spec.bitstreamRef", "must be pinned by digest"}) {
		_ = afs.Delete(ctx, "e2e-oci-tag", metav1.DeleteOptions{})
		t.Fatalf("an AcceleratorFunction naming the tag %s: %v, want a refusal naming the field and the digest", tag, err)
	}
}

// registryAccessFromNode checks the private and own-CA bitstreams fail
// clearly without the node's credentials and CA, and program once it has them.
func registryAccessFromNode(t *testing.T, ctx context.Context, public, private, tlsRegistry *registrytest.Registry, credentials string, secret, ownCA pushed) {
	ns := namespace(t, "e2e-oci-auth")
	claimTemplate(t, ns, "private", "e2e-oci", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: ociAuthAFU, BitstreamRef: secret.Ref})))
	claimTemplate(t, ns, "tls", "e2e-oci", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: ociTLSAFU, BitstreamRef: ownCA.Ref})))
	probePod(t, ns, "without-credentials", "private")
	probePod(t, ns, "without-ca", "tls")
	claimWarning(t, ns, "without-credentials", "requires credentials", private.Host, "--registry-config")
	claimWarning(t, ns, "without-ca", "certificate is not trusted", tlsRegistry.Host, "--registry-ca-file")
	// The kubelet would retry these pods only at its next periodic
	// sync (about a minute): new pods show the node's access at work.
	for _, pod := range []string{"without-credentials", "without-ca"} {
		if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	auths, err := os.ReadFile(credentials)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(tlsRegistry.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	// Node-level access: Secrets of the driver's namespace, mounted by
	// the chart.
	setRegistryAccess(t, localcluster.RegistryAccess{Insecure: []string{public.Host, private.Host}, Credentials: auths, CA: ca})
	probePod(t, ns, "with-credentials", "private")
	probePod(t, ns, "with-ca", "tls")
	programmedFrom(t, ns, "with-credentials", ociAuthAFU, secret.Ref)
	programmedFrom(t, ns, "with-ca", ociTLSAFU, ownCA.Ref)
}
