package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func typeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: "fpga.dra.dev/v1alpha1", Kind: "FpgaConfig"}
}

func TestDecode(t *testing.T) {
	const header = `"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig"`
	const yamlHeader = "apiVersion: fpga.dra.dev/v1alpha1\nkind: FpgaConfig\n"
	wrongType := "want apiVersion: fpga.dra.dev/v1alpha1, kind: FpgaConfig"

	tests := []struct {
		name    string
		raw     string
		want    *FpgaConfig
		wantErr string // substring; empty means success
	}{
		{
			name: "json, every field",
			raw: `{` + header + `,"afuID":"` + testAFUID + `","interfaceID":"` + testInterfaceID +
				`","bitstream":"a/b.gbs","sha256":"` + testSHA256 + `","programming":"Always"}`,
			want: &FpgaConfig{TypeMeta: typeMeta(), AFUID: testAFUID, InterfaceID: testInterfaceID,
				Bitstream: "a/b.gbs", SHA256: testSHA256, Programming: ProgrammingAlways},
		},
		{
			name: "json, not yet defaulted",
			raw:  `{` + header + `,"afuID":"` + testAFUIDDashed + `"}`,
			want: &FpgaConfig{TypeMeta: typeMeta(), AFUID: testAFUIDDashed},
		},
		{
			name: "json with surrounding blanks",
			raw:  "\n  {" + header + `,"afuID":"` + testAFUID + `"}` + "\n",
			want: &FpgaConfig{TypeMeta: typeMeta(), AFUID: testAFUID},
		},
		{
			name: "yaml",
			raw:  yamlHeader + "afuID: " + testAFUID + "\nprogramming: Never\n",
			want: &FpgaConfig{TypeMeta: typeMeta(), AFUID: testAFUID, Programming: ProgrammingNever},
		},
		{
			name: "yaml with document markers and comments",
			raw:  "# config\n---\n" + yamlHeader + "afuID: " + testAFUID + "\n---\n# nothing more\n",
			want: &FpgaConfig{TypeMeta: typeMeta(), AFUID: testAFUID},
		},
		{name: "empty input", raw: "", wantErr: `got apiVersion "", kind ""`},
		{name: "json null", raw: "null", wantErr: wrongType},
		{name: "json array", raw: "[]", wantErr: "cannot unmarshal array"},
		{name: "no apiVersion", raw: `{"kind":"FpgaConfig"}`, wantErr: `got apiVersion "", kind "FpgaConfig": ` + wrongType},
		{name: "no kind", raw: `{"apiVersion":"fpga.dra.dev/v1alpha1"}`, wantErr: wrongType},
		{name: "other version", raw: `{"apiVersion":"fpga.dra.dev/v1","kind":"FpgaConfig"}`, wantErr: `got apiVersion "fpga.dra.dev/v1"`},
		{name: "other group", raw: `{"apiVersion":"gpu.example.com/v1alpha1","kind":"FpgaConfig"}`, wantErr: wrongType},
		{name: "other kind", raw: `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"GpuConfig"}`, wantErr: `kind "GpuConfig": ` + wrongType},
		{name: "meta kind of the group", raw: `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"ListOptions"}`, wantErr: wrongType},
		{name: "unknown field", raw: `{` + header + `,"afuId":"x"}`, wantErr: `unknown field "afuId"`},
		{name: "metadata is unknown", raw: `{` + header + `,"metadata":{"name":"x"}}`, wantErr: `unknown field "metadata"`},
		{name: "duplicate json field", raw: `{` + header + `,"afuID":"a","afuID":"b"}`, wantErr: `duplicate field "afuID"`},
		{name: "duplicate yaml field", raw: yamlHeader + "afuID: a\nafuID: b\n", wantErr: `"afuID" already set`},
		{name: "unknown yaml field", raw: yamlHeader + "bitStream: a\n", wantErr: `unknown field "bitStream"`},
		{name: "trailing json", raw: `{` + header + `}{"afuID":"x"}`, wantErr: "after top-level value"},
		{name: "second yaml document", raw: yamlHeader + "---\n" + yamlHeader, wantErr: "more than one YAML document"},
		{name: "wrong field type", raw: `{` + header + `,"afuID":1}`, wantErr: "FpgaConfig.afuID of type string"},
		{name: "unquoted digits in yaml", raw: yamlHeader + "afuID: 12345678901234567890123456789012\n", wantErr: "FpgaConfig.afuID of type string"},
		{name: "too long", raw: `{` + header + `,"bitstream":"` + strings.Repeat("a", MaxRawLength) + `"}`, wantErr: "more than the 10240 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode() error = %v, want it to contain %q", err, tc.wantErr)
				}
				if got != nil {
					t.Errorf("Decode() = %+v with an error, want nil", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decode() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeAndValidate(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    *FpgaConfig
		wantErr []string // substrings; empty means success
	}{
		{
			name: "defaults and canonicalises",
			raw:  `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"` + testAFUIDDashed + `","sha256":"` + strings.ToUpper(testSHA256) + `"}`,
			want: &FpgaConfig{TypeMeta: typeMeta(), AFUID: testAFUID, SHA256: testSHA256, Programming: ProgrammingIfNeeded},
		},
		{
			name: "af-mode class config",
			raw:  "apiVersion: fpga.dra.dev/v1alpha1\nkind: FpgaConfig\nafuID: " + testAFUID + "\ninterfaceID: " + testInterfaceID + "\nprogramming: Never\n",
			want: &FpgaConfig{TypeMeta: typeMeta(), AFUID: testAFUID, InterfaceID: testInterfaceID, Programming: ProgrammingNever},
		},
		{
			name:    "decode error",
			raw:     `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afu":"x"}`,
			wantErr: []string{`unknown field "afu"`},
		},
		{
			name:    "every validation error is reported",
			raw:     `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","bitstream":"/srv/a.gbs","programming":"Sometimes"}`,
			wantErr: []string{"invalid FpgaConfig", "afuID: Required value", "bitstream: Invalid value", `programming: Unsupported value: "Sometimes"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeAndValidate([]byte(tc.raw))
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("DecodeAndValidate() = %+v, want an error", got)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("DecodeAndValidate() error = %q, want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeAndValidate() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecodeAndValidate() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for _, cfg := range []*FpgaConfig{
		validConfig(),
		{TypeMeta: typeMeta(), AFUID: testAFUID, Programming: ProgrammingNever},
	} {
		raw, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("json.Marshal() error = %v", err)
		}
		got, err := DecodeAndValidate(raw)
		if err != nil {
			t.Fatalf("DecodeAndValidate(%s) error = %v", raw, err)
		}
		if diff := cmp.Diff(cfg, got); diff != "" {
			t.Errorf("round trip of %s mismatch (-want +got):\n%s", raw, diff)
		}
	}
}

func TestDeepCopy(t *testing.T) {
	cfg := validConfig()
	cp, ok := cfg.DeepCopyObject().(*FpgaConfig)
	if !ok {
		t.Fatalf("DeepCopyObject() returned %T, want *FpgaConfig", cfg.DeepCopyObject())
	}
	if diff := cmp.Diff(cfg, cp); diff != "" {
		t.Fatalf("DeepCopyObject() mismatch (-want +got):\n%s", diff)
	}
	cp.AFUID = "changed"
	if cfg.AFUID != testAFUID {
		t.Errorf("changing the copy changed the original: AFUID = %q", cfg.AFUID)
	}
}

func TestAddToScheme(t *testing.T) {
	gvk := SchemeGroupVersion.WithKind(FpgaConfigKind)
	if got := gvk.String(); got != "fpga.dra.dev/v1alpha1, Kind=FpgaConfig" {
		t.Errorf("FpgaConfig GVK = %q", got)
	}
	obj, err := scheme.New(gvk)
	if err != nil {
		t.Fatalf("scheme.New(%v) error = %v", gvk, err)
	}
	if _, ok := obj.(*FpgaConfig); !ok {
		t.Errorf("scheme.New(%v) = %T, want *FpgaConfig", gvk, obj)
	}
}
