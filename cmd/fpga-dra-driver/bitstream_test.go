package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/internal/registrytest"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func TestBitstreamPushInspect(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{User: "admin", Password: "pw"})
	creds := "--registry-config=" + r.CredentialsFile(t, "pw")
	insecure := "--insecure-registries=" + r.Host
	file := sampleBitstream(t)

	out, err := execute(t, newBitstreamCommand(), "push", insecure, creds, "-o", "reference", file, r.Host+"/accel/sample:v1")
	if err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimSpace(out)
	if !strings.HasPrefix(ref, r.Host+"/accel/sample:v1@sha256:") || strings.Count(out, "\n") != 1 {
		t.Fatalf("push -o reference printed %q, want the one digest reference", out)
	}

	out, err = execute(t, newBitstreamCommand(), "inspect", insecure, creds, r.Host+"/accel/sample:v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{ref, simnode.DefaultInterfaceID, simnode.SampleAFUID, "gbs", "intel", "header matches annotations"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	out, err = execute(t, newBitstreamCommand(), "inspect", insecure, creds, "-o", "json", ref)
	if err != nil {
		t.Fatal(err)
	}
	var in inspectedInfo
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("inspect -o json is not JSON: %v\n%s", err, out)
	}
	if in.Reference != ref || in.Annotations.AFUID != simnode.SampleAFUID || in.Bitstream.AFUID != simnode.SampleAFUID || "sha256:"+in.Bitstream.SHA256 != in.LayerDigest {
		t.Errorf("inspect -o json = %+v", in)
	}

	if _, err := execute(t, newBitstreamCommand(), "inspect", insecure, r.Host+"/accel/sample:v1"); err == nil || !strings.Contains(err.Error(), "--registry-config") {
		t.Errorf("inspect without credentials: %v, want an error naming --registry-config", err)
	}
	if _, err := execute(t, newBitstreamCommand(), "push", insecure, creds, file, r.Host+"/accel/sample@"+strings.SplitN(ref, "@", 2)[1]); err == nil || !strings.Contains(err.Error(), "has a digest") {
		t.Errorf("push to a digest reference: %v, want it refused", err)
	}
}
