package slicetemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func TestShapeErrorsNameTheFieldAndTheFix(t *testing.T) {
	id := simnode.DefaultInterfaceID
	for _, tc := range []struct {
		name  string
		shape Shape
		want  []string
	}{
		{"unknown model", Shape{Model: "u280", Cards: 1, InterfaceID: id}, []string{"model", `"u280"`, "pac-a10", "silicom-n5011", "u250", "u55c"}},
		{"no cards", Shape{Model: "pac-a10", InterfaceID: id}, []string{"cards 0", "at least 1"}},
		{"too many cards", Shape{Model: "pac-a10", Cards: 500, InterfaceID: id}, []string{"500"}},
		{"driver the model lacks", Shape{Model: "silicom-n5010", Cards: 1, KernelDriver: discovery.DriverOPAE, InterfaceID: id}, []string{"kernelDriver", `"opae"`, "dfl"}},
		{"Intel driver for an Alveo card", Shape{Model: "u250", Cards: 1, KernelDriver: discovery.DriverDFL, InterfaceID: id}, []string{"kernelDriver", `"dfl"`, "xrt"}},
		{"VFs on an Alveo card", Shape{Model: "u55c", Cards: 1, VirtualFunctions: true, InterfaceID: id}, []string{"virtualFunctions", "false"}},
		{"VFs the model lacks", Shape{Model: "silicom-n5010", Cards: 1, VirtualFunctions: true, InterfaceID: id}, []string{"virtualFunctions", "false"}},
		{"no interface ID", Shape{Model: "pac-a10", Cards: 1}, []string{"interfaceID is required", "discover"}},
		{"bad interface ID", Shape{Model: "pac-a10", Cards: 1, InterfaceID: "69528db6"}, []string{"interfaceID", `"69528db6"`, "32 hex digits"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ForShape(tc.shape, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if _, werr := WriteNode(t.TempDir(), tc.shape); werr == nil {
				t.Errorf("WriteNode accepted the shape ForShape refused")
			}
		})
	}
}

func TestParseShape(t *testing.T) {
	s, err := ParseShape([]byte(`{"model": "pac-d5005", "cards": 2, "interfaceID": "69528DB6-EB31-577A-8C36-68F9FAA081F6", "programmable": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.InterfaceID != simnode.DefaultInterfaceID || s.KernelDriver != discovery.DriverDFL || s.programmable() {
		t.Errorf("parsed %+v: want the canonical interface ID, kernel driver dfl, not programmable", s)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"model": "pac-a10", "cards": 1, "interfaceID": "` + simnode.DefaultInterfaceID + `", "afuID": "x"}`, `unknown field "afuID"`},
		{`{"model": "pac-a10", "cards": "two"}`, "cards"},
		{`{"model": "pac-a10", "cards": 1, "interfaceID": "` + simnode.DefaultInterfaceID + `"} {}`, "exactly one"},
		{`{"model": "pac-a10", "cards": 1}`, "interfaceID is required"},
	} {
		if _, err := ParseShape([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseShape(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestWriteNodeHasTheModelsPCIIDs(t *testing.T) {
	dir := t.TempDir()
	n, err := WriteNode(dir, Shape{Model: "pac-n3000", Cards: 1, InterfaceID: simnode.DefaultInterfaceID, VirtualFunctions: true})
	if err != nil {
		t.Fatal(err)
	}
	read := func(addr, name string) string {
		b, err := os.ReadFile(filepath.Join(n.Root, "sys/bus/pci/devices", addr, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := read(n.Cards[0].PCIAddress, "device"); got != "0x0b30" {
		t.Errorf("PF device %s, want 0x0b30", got)
	}
	if got := read(n.Cards[0].Ports[0].PCIAddress, "device"); got != "0x0b31" {
		t.Errorf("VF device %s, want 0x0b31", got)
	}
	if got := read(n.Cards[0].PCIAddress, "uevent"); !strings.Contains(got, "PCI_ID=8086:0b30") {
		t.Errorf("PF uevent %q lacks PCI_ID=8086:0b30", got)
	}
}

func FuzzParseShape(f *testing.F) {
	f.Add([]byte(`{"model": "pac-a10", "cards": 2, "interfaceID": "69528db6eb31577a8c3668f9faa081f6"}`))
	f.Add([]byte(`{"model": "pac-d5005", "cards": 1, "kernelDriver": "opae", "interfaceID": "69528DB6-EB31-577A-8C36-68F9FAA081F6", "virtualFunctions": true, "programmable": false}`))
	f.Add([]byte(`{"model": "silicom-n5010", "cards": -1, "interfaceID": ""}`))
	f.Add([]byte(`{"model": "x"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseShape(data)
		if err != nil {
			return
		}
		// An accepted shape is normalised: it parses again to itself.
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseShape(b)
		if err != nil {
			t.Fatalf("ParseShape(%s) accepted %+v, whose JSON %s it refuses: %v", data, s, b, err)
		}
		if again.InterfaceID != s.InterfaceID || again.KernelDriver != s.KernelDriver || again.Model != s.Model || again.Cards != s.Cards {
			t.Fatalf("%+v parses again to %+v", s, again)
		}
	})
}
