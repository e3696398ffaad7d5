// Package webhook is the fpga-dra-controller's validating admission webhook.
// It rejects, at admission, what the node would reject at prepare time:
// opaque configs for the driver in ResourceClaims and ResourceClaimTemplates
// that are not a valid FpgaConfig (strict decoding, then the same defaulting
// and validation as the node), and AcceleratorFunctions and FpgaRegions that
// break the rules of api/v1alpha1. Every error names the field path in the
// reviewed object, e.g. spec.devices.config[0].opaque.parameters.afuID.
package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
)

// maxReviewBytes bounds the body of one AdmissionReview: the API server's
// own request limit (3 MiB) plus the review's envelope.
const maxReviewBytes = 4 << 20

// Handler serves AdmissionReview requests (admission.k8s.io/v1) for the
// validating webhook. Create it with NewHandler.
type Handler struct {
	driverName string
	metrics    *Metrics
}

// NewHandler returns a Handler for the DRA driver driverName; metrics may be
// nil.
func NewHandler(driverName string, metrics *Metrics) *Handler {
	return &Handler{driverName: driverName, metrics: metrics}
}

// ServeHTTP decodes an AdmissionReview, reviews its request and answers with
// the response. A body that is not an AdmissionReview gets HTTP 400; the API
// server then applies the webhook's failure policy.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	if r.Method != http.MethodPost {
		http.Error(w, "use POST with an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		http.Error(w, fmt.Sprintf("content type %q: want application/json", ct), http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil {
		http.Error(w, fmt.Sprintf("read the request body: %v", err), http.StatusBadRequest)
		return
	}
	if len(body) > maxReviewBytes {
		http.Error(w, fmt.Sprintf("request body is larger than %d bytes", maxReviewBytes), http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		http.Error(w, fmt.Sprintf("decode AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	if review.Request == nil {
		http.Error(w, "AdmissionReview has no request", http.StatusBadRequest)
		return
	}
	start := time.Now()
	resp := h.Review(review.Request)
	h.metrics.observe(review.Request.Resource.Resource, resp.Allowed, start)
	if !resp.Allowed {
		logger.V(2).Info("Denied", "resource", review.Request.Resource, "namespace", review.Request.Namespace,
			"name", review.Request.Name, "message", resp.Result.Message)
	}
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: resp,
	})
	if err != nil {
		http.Error(w, fmt.Sprintf("encode AdmissionReview: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// Review validates one admission request. Deletes, subresources and
// resources the webhook does not know are allowed.
func (h *Handler) Review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.SubResource != "" || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return resp
	}
	if req.Operation == admissionv1.Update && unchangedSpec(req) {
		// Metadata only (labels, finalizers, the garbage collector ending
		// a deletion): what was admitted stays admitted, even if a later
		// release validates more strictly.
		return resp
	}
	var errs field.ErrorList
	var err error
	resource := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	switch resource {
	case deviceClasses:
		errs, err = h.validateDeviceClass(req.Object.Raw)
	case resourceClaims:
		errs, err = h.validateClaim(req.Object.Raw)
	case resourceClaimTemplates:
		errs, err = h.validateClaimTemplate(req.Object.Raw)
	case acceleratorFunctions:
		errs, err = validateAcceleratorFunction(req.Object.Raw)
	case fpgaRegions:
		errs, err = validateFpgaRegion(req.Object.Raw)
	default:
		resp.Warnings = []string{fmt.Sprintf("the %s webhook does not validate %s", h.driverName, resource)}
		return resp
	}
	if err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
			Message: fmt.Sprintf("decode %s: %v", req.Kind.Kind, err)}
		return resp
	}
	if len(errs) > 0 {
		status := apierrors.NewInvalid(schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}, req.Name, errs).Status()
		resp.Allowed = false
		resp.Result = &status
	}
	return resp
}

// unchangedSpec reports whether an update leaves the object's spec as it
// was. An object being deleted is no exception: a DeviceClass held by a
// finalizer stays usable while it terminates, and its spec can still change.
func unchangedSpec(req *admissionv1.AdmissionRequest) bool {
	var obj, old struct {
		Spec json.RawMessage `json:"spec"`
	}
	if json.Unmarshal(req.Object.Raw, &obj) != nil || json.Unmarshal(req.OldObject.Raw, &old) != nil {
		return false
	}
	var a, b any
	return len(old.Spec) > 0 && json.Unmarshal(obj.Spec, &a) == nil && json.Unmarshal(old.Spec, &b) == nil && reflect.DeepEqual(a, b)
}
