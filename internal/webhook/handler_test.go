package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

const (
	driverName = "fpga.dra.dev"
	afuID      = "d8424dc4a4a3c413f89e433683f9040b"
	ifID       = "69528db6eb31577a8c3668f9faa081f6"
	allF       = "ffffffffffffffffffffffffffffffff"
)

// fpgaConfig is an FpgaConfig as JSON with extra fields.
func fpgaConfig(fields string) string {
	s := `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig"`
	if fields != "" {
		s += "," + fields
	}
	return s + "}"
}

// opaque is one entry of spec.devices.config.
func opaque(driver, parameters string) string {
	return `{"opaque":{"driver":"` + driver + `","parameters":` + parameters + `}}`
}

func claimSpecJSON(configs ...string) string {
	return `{"devices":{"requests":[{"name":"fpga","exactly":{"deviceClassName":"nlb0"}}],"config":[` + strings.Join(configs, ",") + `]}}`
}

func claim(apiVersion string, configs ...string) string {
	return `{"apiVersion":"` + apiVersion + `","kind":"ResourceClaim","metadata":{"name":"c","namespace":"default"},"spec":` + claimSpecJSON(configs...) + `}`
}

func claimTemplate(configs ...string) string {
	return `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"t","namespace":"default"},"spec":{"spec":` + claimSpecJSON(configs...) + `}}`
}

// review wraps an object into an AdmissionReview request.
func review(group, version, resource, kind string, op admissionv1.Operation, object string) []byte {
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("review-uid"),
			Kind:      metav1.GroupVersionKind{Group: group, Version: version, Kind: kind},
			Resource:  metav1.GroupVersionResource{Group: group, Version: version, Resource: resource},
			Name:      "obj",
			Operation: op,
		},
	}
	if object != "" {
		r.Request.Object.Raw = []byte(object)
	}
	out, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return out
}

// post sends body to h as the API server does and decodes the answer.
func post(t *testing.T, h http.Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, ValidatePath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode the answer: %v", err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("answer = %+v, want an admission.k8s.io/v1 AdmissionReview with a response", out)
	}
	if out.Response.UID != "review-uid" {
		t.Errorf("response UID = %q, want the request's", out.Response.UID)
	}
	return out.Response
}

// reviewCase is an admission review and the answer it should get.
type reviewCase struct {
	name string
	body []byte
	// wantDenied holds substrings of the denial; empty means allowed.
	wantDenied []string
}

// TestReview: claims and claim templates with the driver's configs.
func TestReview(t *testing.T) {
	valid := fpgaConfig(`"afuID":"` + afuID + `","interfaceID":"` + ifID + `","programming":"IfNeeded"`)
	runReviews(t, []reviewCase{
		{
			name: "claim with a valid config",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create, claim("resource.k8s.io/v1", opaque(driverName, valid))),
		},
		{
			name: "claim with a config to default and canonicalise",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig(`"afuID":"D8424DC4-A4A3-C413-F89E-433683F9040B"`)))),
		},
		{
			name: "claim without configs",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create, claim("resource.k8s.io/v1")),
		},
		{
			name: "another driver's config is not looked at",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1", opaque("gpu.example.com", `{"whatever":1}`))),
		},
		{
			name: "missing afuID, with its path",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1", opaque("gpu.example.com", `{}`), opaque(driverName, fpgaConfig(`"programming":"Always"`)))),
			wantDenied: []string{`ResourceClaim.resource.k8s.io "obj" is invalid`, "spec.devices.config[1].opaque.parameters.afuID: Required value"},
		},
		{
			name: "unknown field",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig(`"afuId":"`+afuID+`"`)))),
			wantDenied: []string{"spec.devices.config[0].opaque.parameters: Invalid value", `unknown field "afuId"`},
		},
		{
			name: "wrong kind",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1", opaque(driverName, `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaRegion"}`))),
			wantDenied: []string{"spec.devices.config[0].opaque.parameters", "want apiVersion: fpga.dra.dev/v1alpha1, kind: FpgaConfig"},
		},
		{
			name: "every error of a config",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig(`"afuID":"`+allF+`","bitstream":"../x.gbs","programming":"Never"`)))),
			wantDenied: []string{
				"spec.devices.config[0].opaque.parameters.afuID: Invalid value", "unusable function",
				"spec.devices.config[0].opaque.parameters.bitstream: Invalid value", `".."`,
				"spec.devices.config[0].opaque.parameters.bitstream: Forbidden: must be empty when programming is Never",
			},
		},
		{
			name: "v1beta2 claim",
			body: review("resource.k8s.io", "v1beta2", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1beta2", opaque(driverName, fpgaConfig(`"afuID":"1234"`)))),
			wantDenied: []string{`spec.devices.config[0].opaque.parameters.afuID: Invalid value: "1234": has 4 hex digits, want 32`},
		},
		{
			name: "bitstreamRef pinned by digest",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig(`"afuID":"`+afuID+`","bitstreamRef":"registry.example.com/accel/nlb0:v2@sha256:`+strings.Repeat("ab", 32)+`"`)))),
		},
		{
			name: "bitstreamRef with a tag only",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
				claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig(`"afuID":"`+afuID+`","bitstreamRef":"registry.example.com/accel/nlb0:v2"`)))),
			wantDenied: []string{
				`spec.devices.config[0].opaque.parameters.bitstreamRef: Invalid value: "registry.example.com/accel/nlb0:v2": has no digest`,
				"pin the manifest digest, as in registry.example.com/accel/nlb0:v2@sha256:",
			},
		},
		{
			name: "template with a valid config",
			body: review("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", admissionv1.Update, claimTemplate(opaque(driverName, valid))),
		},
		{
			name: "template with a bad sha256",
			body: review("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", admissionv1.Create,
				claimTemplate(opaque(driverName, fpgaConfig(`"afuID":"`+afuID+`","sha256":"abc"`)))),
			wantDenied: []string{`ResourceClaimTemplate.resource.k8s.io "obj" is invalid`, `spec.spec.devices.config[0].opaque.parameters.sha256: Invalid value: "abc"`},
		},
		{
			name: "delete is allowed",
			body: review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Delete, ""),
		},
		{
			name:       "an object that is no claim",
			body:       review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create, `{"spec":[]}`),
			wantDenied: []string{"decode ResourceClaim"},
		},
	})
}

// TestReviewCustomResources: AcceleratorFunctions and FpgaRegions.
func TestReviewCustomResources(t *testing.T) {
	runReviews(t, []reviewCase{
		{
			name: "valid AcceleratorFunction",
			body: review("fpga.dra.dev", "v1alpha1", "acceleratorfunctions", "AcceleratorFunction", admissionv1.Create,
				`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"AcceleratorFunction","metadata":{"name":"nlb0"},"spec":{"afuID":"`+afuID+`","interfaceID":"`+ifID+`","mode":"region","bitstream":"nlb0.gbs"}}`),
		},
		{
			name: "AcceleratorFunction with a tag-only bitstreamRef",
			body: review("fpga.dra.dev", "v1alpha1", "acceleratorfunctions", "AcceleratorFunction", admissionv1.Create,
				`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"AcceleratorFunction","metadata":{"name":"nlb0"},"spec":{"afuID":"`+afuID+`","interfaceID":"`+ifID+`","mode":"region","bitstreamRef":"registry.example.com/accel/nlb0:v2"}}`),
			wantDenied: []string{`spec.bitstreamRef: Invalid value: "registry.example.com/accel/nlb0:v2": has no digest`},
		},
		{
			name: "AcceleratorFunction in region mode without interface ID",
			body: review("fpga.dra.dev", "v1alpha1", "acceleratorfunctions", "AcceleratorFunction", admissionv1.Update,
				`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"AcceleratorFunction","metadata":{"name":"nlb0"},"spec":{"afuID":"`+afuID+`","mode":"region"}}`),
			wantDenied: []string{`AcceleratorFunction.fpga.dra.dev "obj" is invalid`, "spec.interfaceID: Required value: required in region mode"},
		},
		{
			name: "AcceleratorFunction with a bitstream in af mode and a long name",
			body: review("fpga.dra.dev", "v1alpha1", "acceleratorfunctions", "AcceleratorFunction", admissionv1.Create,
				`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"AcceleratorFunction","metadata":{"name":"`+strings.Repeat("a", 250)+`"},"spec":{"afuID":"`+afuID+`","mode":"af","bitstream":"x.gbs"}}`),
			wantDenied: []string{"metadata.name: Too long: may not be more than 245 bytes", "spec.bitstream: Forbidden: allowed in region mode only"},
		},
		{
			name: "valid FpgaRegion",
			body: review("fpga.dra.dev", "v1alpha1", "fpgaregions", "FpgaRegion", admissionv1.Create,
				`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaRegion","metadata":{"name":"pac"},"spec":{"interfaceID":"`+ifID+`"}}`),
		},
		{
			name: "FpgaRegion with the all-f ID",
			body: review("fpga.dra.dev", "v1alpha1", "fpgaregions", "FpgaRegion", admissionv1.Create,
				`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaRegion","metadata":{"name":"pac"},"spec":{"interfaceID":"`+allF+`"}}`),
			wantDenied: []string{"spec.interfaceID: Invalid value", "unusable region"},
		},
	})
}

// runReviews posts each case's review to the handler and checks the
// answer.
func runReviews(t *testing.T, tests []reviewCase) {
	h := NewHandler(driverName, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, h, tc.body)
			if len(tc.wantDenied) == 0 {
				if !resp.Allowed {
					t.Fatalf("denied: %+v", resp.Result)
				}
				return
			}
			if resp.Allowed || resp.Result == nil {
				t.Fatalf("allowed, want a denial containing %q", tc.wantDenied)
			}
			for _, want := range tc.wantDenied {
				if !strings.Contains(resp.Result.Message, want) {
					t.Errorf("message = %q\nwant it to contain %q", resp.Result.Message, want)
				}
			}
		})
	}
}

// TestReviewInvalidIsStructured checks that a denial carries the status
// fields kubectl shows: code 422, reason Invalid and one cause per field.
func TestReviewInvalidIsStructured(t *testing.T) {
	resp := post(t, NewHandler(driverName, nil), review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
		claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig(`"interfaceID":"x"`)))))
	r := resp.Result
	if r.Code != http.StatusUnprocessableEntity || r.Reason != metav1.StatusReasonInvalid || r.Details == nil {
		t.Fatalf("result = %+v", r)
	}
	var fields []string
	for _, c := range r.Details.Causes {
		fields = append(fields, c.Field)
	}
	want := []string{"spec.devices.config[0].opaque.parameters.afuID", "spec.devices.config[0].opaque.parameters.interfaceID"}
	if strings.Join(fields, " ") != strings.Join(want, " ") {
		t.Errorf("causes name %v, want %v", fields, want)
	}
}

func TestServeHTTPRejectsNonReviews(t *testing.T) {
	h := NewHandler(driverName, nil)
	for _, tc := range []struct {
		name, method, contentType, body string
		want                            int
	}{
		{name: "GET", method: http.MethodGet, contentType: "application/json", want: http.StatusMethodNotAllowed},
		{name: "YAML", method: http.MethodPost, contentType: "application/yaml", body: "{}", want: http.StatusUnsupportedMediaType},
		{name: "not JSON", method: http.MethodPost, contentType: "application/json", body: "{", want: http.StatusBadRequest},
		{name: "no request", method: http.MethodPost, contentType: "application/json", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, want: http.StatusBadRequest},
		{name: "too large", method: http.MethodPost, contentType: "application/json", body: strings.Repeat(" ", maxReviewBytes+1), want: http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, ValidatePath, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("HTTP %d (%s), want %d", rec.Code, strings.TrimSpace(rec.Body.String()), tc.want)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	m := NewMetrics()
	reg := metrics.NewKubeRegistry()
	m.Register(reg.MustRegister)
	h := NewHandler(driverName, m)
	post(t, h, review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create, claim("resource.k8s.io/v1")))
	post(t, h, review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
		claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig("")))))
	want := `
# HELP fpga_dra_webhook_admission_requests_total [ALPHA] Admission reviews by resource and verdict (allowed, denied).
# TYPE fpga_dra_webhook_admission_requests_total counter
fpga_dra_webhook_admission_requests_total{resource="resourceclaims",verdict="allowed"} 1
fpga_dra_webhook_admission_requests_total{resource="resourceclaims",verdict="denied"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fpga_dra_webhook_admission_requests_total"); err != nil {
		t.Error(err)
	}
}
