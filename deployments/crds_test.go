package deployments_test

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemavalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

// crd returns the chart's CRD of a kind, in the API server's internal form.
func crd(t *testing.T, kind string) *apiextensions.CustomResourceDefinition {
	t.Helper()
	for _, o := range decodeFile(t, "helm/fpga-dra-driver/crds/fpga.dra.dev_"+strings.ToLower(kind)+"s.yaml") {
		v1, ok := o.obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok || v1.Spec.Names.Kind != kind {
			continue
		}
		var internal apiextensions.CustomResourceDefinition
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1, &internal, nil); err != nil {
			t.Fatal(err)
		}
		return &internal
	}
	t.Fatalf("no CRD of kind %s in the chart", kind)
	return nil
}

// TestCRDsPassAPIServerValidation runs the API server's validation of a
// CRD being created: structural schema, CEL rules that compile and fit
// their cost budget, printer columns.
func TestCRDsPassAPIServerValidation(t *testing.T) {
	for _, kind := range []string{v1alpha1.AcceleratorFunctionKind, v1alpha1.FpgaRegionKind} {
		t.Run(kind, func(t *testing.T) {
			c := crd(t, kind)
			if c.Spec.Scope != apiextensions.ClusterScoped || c.Spec.Group != v1alpha1.GroupName {
				t.Errorf("scope %s, group %s; want a cluster-scoped %s CRD", c.Spec.Scope, c.Spec.Group, v1alpha1.GroupName)
			}
			c.Status.StoredVersions = []string{"v1alpha1"}
			if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), c); len(errs) > 0 {
				t.Errorf("the API server would reject the CRD: %v", errs.ToAggregate())
			}
		})
	}
}

// crValidator validates custom resources as the API server does after
// decoding: defaulting, the OpenAPI schema, then the CEL rules.
type crValidator struct {
	structural *structuralschema.Structural
	schema     schemavalidation.SchemaCreateValidator
	cel        *cel.Validator
}

func newCRValidator(t *testing.T, kind string) *crValidator {
	t.Helper()
	c := crd(t, kind)
	// The internal form holds a schema shared by every version at the top.
	var props *apiextensions.JSONSchemaProps
	switch {
	case c.Spec.Validation != nil:
		props = c.Spec.Validation.OpenAPIV3Schema
	case c.Spec.Versions[0].Schema != nil:
		props = c.Spec.Versions[0].Schema.OpenAPIV3Schema
	default:
		t.Fatalf("CRD %s has no schema", c.Name)
	}
	s, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatalf("structural schema: %v", err)
	}
	v, _, err := schemavalidation.NewSchemaValidator(props)
	if err != nil {
		t.Fatalf("schema validator: %v", err)
	}
	return &crValidator{structural: s, schema: v, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}
}

// validate returns the errors of obj (the object is defaulted first).
func (v *crValidator) validate(t *testing.T, obj runtime.Object) field.ErrorList {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	structuraldefaulting.Default(u, v.structural)
	errs := schemavalidation.ValidateCustomResource(nil, u, v.schema)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, u, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

const (
	afuID = "d8424dc4a4a3c413f89e433683f9040b"
	ifID  = "69528db6eb31577a8c3668f9faa081f6"
	allF  = "ffffffffffffffffffffffffffffffff"
	sum   = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
)

// TestAcceleratorFunctionSchema checks the CRD's OpenAPI and CEL rules on
// objects, and that the webhook's Go validation (which the controller uses
// too) agrees with the API server on every one of them.
func TestAcceleratorFunctionSchema(t *testing.T) {
	v := newCRValidator(t, v1alpha1.AcceleratorFunctionKind)
	for _, tc := range afSchemaCases() {
		t.Run(tc.name, func(t *testing.T) { checkAFSchema(t, v, tc) })
	}
	for _, o := range decodeFile(t, "examples/logical-names/logical-names.yaml") {
		if ex, ok := o.obj.(*v1alpha1.AcceleratorFunction); ok {
			if errs := v.validate(t, ex); len(errs) > 0 {
				t.Errorf("%s: the API server would reject the example: %v", o.where, errs.ToAggregate())
			}
			if errs := v1alpha1.ValidateAcceleratorFunction(ex); len(errs) > 0 {
				t.Errorf("%s: the webhook would reject the example: %v", o.where, errs.ToAggregate())
			}
		}
	}
}

// af returns an AcceleratorFunction named name with spec.
func af(name string, spec v1alpha1.AcceleratorFunctionSpec) *v1alpha1.AcceleratorFunction {
	o := &v1alpha1.AcceleratorFunction{Spec: spec}
	o.APIVersion, o.Kind, o.Name = v1alpha1.SchemeGroupVersion.String(), v1alpha1.AcceleratorFunctionKind, name
	return o
}

// afSchemaCase is an AcceleratorFunction and what the API server says of it.
type afSchemaCase struct {
	name string
	obj  *v1alpha1.AcceleratorFunction
	// wantErr is a substring of the API server's error; empty: valid.
	wantErr string
}

// afSchemaCases lists objects the CRD accepts and one per rule it enforces.
func afSchemaCases() []afSchemaCase {
	return []afSchemaCase{
		{name: "af mode defaulted", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID})},
		{name: "region mode, every field", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID,
			Mode: v1alpha1.ModeRegion, Bitstream: "a/.b.gbs", SHA256: sum, Description: "x"})},
		{name: "longest name", obj: af(strings.Repeat("a", 245), v1alpha1.AcceleratorFunctionSpec{AFUID: afuID})},
		{name: "name too long", obj: af(strings.Repeat("a", 246), v1alpha1.AcceleratorFunctionSpec{AFUID: afuID}),
			wantErr: "name must be at most 245 characters"},
		{name: "afuID missing", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{}), wantErr: "spec.afuID in body should be at least 32 chars long"},
		{name: "afuID uppercase", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: strings.ToUpper(afuID)}),
			wantErr: `spec.afuID: Invalid value: "D8424DC4A4A3C413F89E433683F9040B": must be 32 lowercase hex digits`},
		{name: "afuID dashed", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: "d8424dc4-a4a3-c413-f89e-433683f9040b"}),
			wantErr: "spec.afuID: Too long"},
		{name: "afuID short", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: "d8424dc4"}), wantErr: "spec.afuID: Invalid value"},
		{name: "afuID all f", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: allF}), wantErr: "the all-f ID marks an unusable function"},
		{name: "interfaceID all f", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: allF}),
			wantErr: "the all-f ID marks an unusable region"},
		{name: "unknown mode", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, Mode: "devel"}),
			wantErr: `spec.mode: Unsupported value: "devel"`},
		{name: "region mode without interfaceID", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, Mode: v1alpha1.ModeRegion}),
			wantErr: "interfaceID is required in region mode"},
		{name: "bitstream in af mode", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, Bitstream: "a.gbs"}),
			wantErr: "bitstream, bitstreamRef and sha256 are allowed in region mode only"},
		{name: "sha256 in af mode", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, SHA256: sum}),
			wantErr: "bitstream, bitstreamRef and sha256 are allowed in region mode only"},
		{name: "absolute bitstream", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion, Bitstream: "/srv/a.gbs"}),
			wantErr: "must be relative to the node's bitstream repository"},
		{name: "escaping bitstream", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion, Bitstream: "a/../../b.gbs"}),
			wantErr: "must be a clean path"},
		{name: "bitstream is the repository", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion, Bitstream: "."}),
			wantErr: "must be a clean path"},
		{name: "bitstream with an empty element", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion, Bitstream: "a//b.gbs"}),
			wantErr: "must be a clean path"},
		{name: "sha256 uppercase", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion, SHA256: strings.ToUpper(sum)}),
			wantErr: "must be 64 lowercase hex digits"},
		{name: "region mode, bitstreamRef", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion,
			BitstreamRef: "registry.example.com/accel/nlb0:v2@sha256:" + sum})},
		{name: "bitstreamRef on localhost with a port", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion,
			BitstreamRef: "localhost:5000/nlb0@sha256:" + sum})},
		{name: "bitstreamRef with a tag only", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion,
			BitstreamRef: "registry.example.com/accel/nlb0:v2"}), wantErr: "must be pinned by digest"},
		{name: "bitstreamRef without a registry", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion,
			BitstreamRef: "accel/nlb0@sha256:" + sum}), wantErr: "must be REGISTRY/REPOSITORY[:TAG]@sha256:"},
		{name: "bitstreamRef with an uppercase digest", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion,
			BitstreamRef: "registry.example.com/nlb0@sha256:" + strings.ToUpper(sum)}), wantErr: "must be REGISTRY/REPOSITORY[:TAG]@sha256:"},
		{name: "bitstreamRef too long", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion,
			BitstreamRef: "registry.example.com/" + strings.Repeat("a", 500) + "@sha256:" + sum}), wantErr: "spec.bitstreamRef: Too long"},
		{name: "bitstream and bitstreamRef", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, InterfaceID: ifID, Mode: v1alpha1.ModeRegion,
			Bitstream: "a.gbs", BitstreamRef: "registry.example.com/nlb0@sha256:" + sum}), wantErr: "bitstream and bitstreamRef exclude each other"},
		{name: "bitstreamRef in af mode", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID,
			BitstreamRef: "registry.example.com/nlb0@sha256:" + sum}), wantErr: "bitstream, bitstreamRef and sha256 are allowed in region mode only"},
		{name: "description too long", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, Description: strings.Repeat("x", 1025)}),
			wantErr: "spec.description: Too long"},
		// maxLength counts characters, not bytes: 1,024 of them in any
		// script fit.
		{name: "longest description, not ASCII", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, Description: strings.Repeat("é", 1024)})},
		{name: "description too long, not ASCII", obj: af("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afuID, Description: strings.Repeat("é", 1025)}),
			wantErr: "spec.description: Too long"},
	}
}

// checkAFSchema checks that the API server judges tc.obj as tc.wantErr
// says, and that the webhook, after defaulting, agrees.
func checkAFSchema(t *testing.T, v *crValidator, tc afSchemaCase) {
	t.Helper()
	errs := v.validate(t, tc.obj)
	if tc.wantErr == "" {
		if len(errs) > 0 {
			t.Fatalf("the API server would reject it: %v", errs.ToAggregate())
		}
	} else if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
		t.Fatalf("API server errors = %v, want one containing %q", errs.ToAggregate(), tc.wantErr)
	}
	// The webhook sees the object after defaulting.
	defaulted := tc.obj.DeepCopy()
	if defaulted.Spec.Mode == "" {
		defaulted.Spec.Mode = v1alpha1.ModeAF
	}
	goErrs := v1alpha1.ValidateAcceleratorFunction(defaulted)
	if (len(goErrs) == 0) != (len(errs) == 0) {
		t.Errorf("the webhook and the CRD disagree:\nCRD:     %v\nwebhook: %v", errs.ToAggregate(), goErrs.ToAggregate())
	}
}

// TestBitstreamRefPattern checks that the CRD checks bitstreamRef with
// v1alpha1.BitstreamRefPattern, the expression that accepts exactly what
// the webhook and the node accept (see FuzzParseBitstreamRef).
func TestBitstreamRefPattern(t *testing.T) {
	c := crd(t, v1alpha1.AcceleratorFunctionKind)
	props := c.Spec.Validation
	var schema *apiextensions.JSONSchemaProps
	if props != nil {
		schema = props.OpenAPIV3Schema
	} else {
		schema = c.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	ref := schema.Properties["spec"].Properties["bitstreamRef"]
	want := "self.matches('" + v1alpha1.BitstreamRefPattern + "')"
	for _, rule := range ref.XValidations {
		if strings.Contains(rule.Rule, want) {
			return
		}
	}
	t.Errorf("no rule of spec.bitstreamRef contains %s; copy v1alpha1.BitstreamRefPattern into its marker. Rules: %+v", want, ref.XValidations)
}

func TestFpgaRegionSchema(t *testing.T) {
	v := newCRValidator(t, v1alpha1.FpgaRegionKind)
	region := func(interfaceID string) *v1alpha1.FpgaRegion {
		o := &v1alpha1.FpgaRegion{Spec: v1alpha1.FpgaRegionSpec{InterfaceID: interfaceID}}
		o.APIVersion, o.Kind, o.Name = v1alpha1.SchemeGroupVersion.String(), v1alpha1.FpgaRegionKind, "pac-a10"
		return o
	}
	for _, tc := range []struct {
		name, interfaceID, wantErr string
	}{
		{name: "valid", interfaceID: ifID},
		{name: "missing", interfaceID: "", wantErr: "spec.interfaceID"},
		{name: "not hex", interfaceID: "z" + ifID[1:], wantErr: "must be 32 lowercase hex digits"},
		{name: "all f", interfaceID: allF, wantErr: "unusable region"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := v.validate(t, region(tc.interfaceID))
			if tc.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("the API server would reject it: %v", errs.ToAggregate())
				}
			} else if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
				t.Fatalf("API server errors = %v, want one containing %q", errs.ToAggregate(), tc.wantErr)
			}
			if goErrs := v1alpha1.ValidateFpgaRegion(region(tc.interfaceID)); (len(goErrs) == 0) != (len(errs) == 0) {
				t.Errorf("the webhook and the CRD disagree:\nCRD:     %v\nwebhook: %v", errs.ToAggregate(), goErrs.ToAggregate())
			}
		})
	}
}

// TestStrictDecodingCatchesMistakes makes sure the schema check of the
// manifests is not vacuous.
func TestStrictDecodingCatchesMistakes(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 1}\n",
		"apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: x}\nspec: {selectors: [{cel: {expresion: 'true'}}]}\n",
		"apiVersion: fpga.dra.dev/v1alpha1\nkind: AcceleratorFunction\nmetadata: {name: x}\nspec: {afuId: x}\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nmetadata: {name: y}\n",
	} {
		if _, _, err := strict.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("strict decoding accepted:\n%s", doc)
		}
	}
}

// TestOCIBitstreamExample: the OCI example's AcceleratorFunction passes the
// API server and the webhook, and its claim carries a config the node
// accepts, both naming a digest-pinned reference.
func TestOCIBitstreamExample(t *testing.T) {
	v := newCRValidator(t, v1alpha1.AcceleratorFunctionKind)
	var afs, claims int
	for _, o := range decodeFile(t, "examples/oci-bitstream/bitstream-ref.yaml") {
		switch obj := o.obj.(type) {
		case *v1alpha1.AcceleratorFunction:
			afs++
			if errs := v.validate(t, obj); len(errs) > 0 {
				t.Errorf("%s: the API server would reject it: %v", o.where, errs.ToAggregate())
			}
			if errs := v1alpha1.ValidateAcceleratorFunction(obj); len(errs) > 0 || obj.Spec.BitstreamRef == "" {
				t.Errorf("%s: the webhook would reject it (%v) or it names no bitstreamRef", o.where, errs.ToAggregate())
			}
		case *resourceapi.ResourceClaim:
			for _, c := range obj.Spec.Devices.Config {
				claims++
				cfg, err := v1alpha1.DecodeAndValidate(c.Opaque.Parameters.Raw)
				if err != nil || cfg.BitstreamRef == "" {
					t.Errorf("%s: config %+v, %v; want a valid one naming a bitstreamRef", o.where, cfg, err)
				}
			}
		}
	}
	if afs != 1 || claims != 1 {
		t.Errorf("found %d AcceleratorFunctions and %d claim configs, want 1 of each", afs, claims)
	}
}
