package v1alpha1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// MaxRawLength is the largest input Decode accepts, in bytes: the most the
// API server stores in a device config's opaque parameters.
const MaxRawLength = resourceapi.OpaqueParametersMaxLength

var (
	scheme = newScheme()

	// jsonDecoder and yamlDecoder fail on unknown and duplicate fields.
	jsonDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Strict: true})
	yamlDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(AddToScheme(s))
	return s
}

// Decode strictly decodes an FpgaConfig from JSON (input starting with "{")
// or from a single YAML document. It rejects input longer than MaxRawLength,
// trailing data after the JSON object, a second YAML document, unknown
// fields, duplicate fields, and any apiVersion or kind other than
// fpga.dra.dev/v1alpha1 FpgaConfig. In YAML, IDs made of digits only must be
// quoted, or they decode as numbers and are rejected. Decode neither defaults
// nor validates: see DecodeAndValidate.
func Decode(raw []byte) (*FpgaConfig, error) {
	if len(raw) > MaxRawLength {
		return nil, fmt.Errorf("decode %s: input is %d bytes, more than the %d bytes allowed for opaque parameters",
			FpgaConfigKind, len(raw), MaxRawLength)
	}
	decoder := jsonDecoder
	if !utilyaml.IsJSONBuffer(raw) {
		decoder = yamlDecoder
		if err := checkSingleDocument(raw); err != nil {
			return nil, fmt.Errorf("decode %s: %w", FpgaConfigKind, err)
		}
	}
	obj, gvk, err := decoder.Decode(raw, nil, nil)
	if err != nil {
		if runtime.IsNotRegisteredError(err) || runtime.IsMissingKind(err) || runtime.IsMissingVersion(err) {
			return nil, wrongTypeError(gvk)
		}
		return nil, fmt.Errorf("decode %s: %w%s", FpgaConfigKind, err, unknownFieldHint(err))
	}
	cfg, ok := obj.(*FpgaConfig)
	if !ok {
		return nil, wrongTypeError(gvk)
	}
	return cfg, nil
}

// DecodeAndValidate decodes raw with Decode, applies Default and returns the
// config if Validate accepts it.
func DecodeAndValidate(raw []byte) (*FpgaConfig, error) {
	cfg, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", FpgaConfigKind, err)
	}
	return cfg, nil
}

// wrongTypeError says which apiVersion and kind were found and which are
// expected.
func wrongTypeError(gvk *schema.GroupVersionKind) error {
	var apiVersion, kind string
	if gvk != nil {
		apiVersion, kind = gvk.GroupVersion().String(), gvk.Kind
	}
	return fmt.Errorf("decode %s: got apiVersion %q, kind %q: want apiVersion: %s, kind: %s",
		FpgaConfigKind, apiVersion, kind, SchemeGroupVersion, FpgaConfigKind)
}

// checkSingleDocument fails when raw holds more than one YAML document that is
// not empty: the YAML decoder would silently use the first one only.
func checkSingleDocument(raw []byte) error {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	documents := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("split YAML documents: %w", err)
		}
		if js, err := yaml.YAMLToJSON(doc); err == nil && string(js) == "null" {
			continue // blank, comments only, or an explicit null
		}
		documents++
		if documents > 1 {
			return errors.New("input holds more than one YAML document: give exactly one FpgaConfig")
		}
	}
}

// fpgaConfigFields are FpgaConfig's JSON field names, read from its tags.
var fpgaConfigFields = jsonFields(reflect.TypeFor[FpgaConfig]())

// jsonFields lists the JSON names of struct type t's fields, those of
// inline structs (TypeMeta) included.
func jsonFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case opts == "inline":
			names = append(names, jsonFields(f.Type)...)
		case name != "" && name != "-":
			names = append(names, name)
		}
	}
	return names
}

// unknownFieldHint names the fix for a strict decoding error's unknown
// fields: the field of that name in another case (afuId, the Intel
// webhook's spelling, is afuID here), else the fields there are.
func unknownFieldHint(err error) string {
	if !runtime.IsStrictDecodingError(err) {
		return ""
	}
	var hints []string
	strict, ok := err.(interface{ Errors() []error })
	if !ok {
		return ""
	}
	for _, e := range strict.Errors() {
		name, ok := strings.CutPrefix(e.Error(), `unknown field "`)
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, `"`)
		fix := fmt.Sprintf("remove %q (the fields are %s)", name, strings.Join(fpgaConfigFields, ", "))
		for _, f := range fpgaConfigFields {
			if strings.EqualFold(f, name) {
				fix = fmt.Sprintf("spell %q as %q", name, f)
			}
		}
		hints = append(hints, fix)
	}
	if len(hints) == 0 {
		return ""
	}
	return ": " + strings.Join(hints, "; ")
}
