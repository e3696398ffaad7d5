// Package claimroute names the node a ResourceClaim allocated with binding
// conditions must be programmed on, as a label on the claim: the
// controller (internal/controller) sets it, each node daemon watches only
// the claims labelled with its own node. A node daemon's cost then does not
// grow with the claims of other nodes: the API server sends it only its own.
package claimroute

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Label is the label key, qualified by the driver name:
// "<driver>/node".
func Label(driverName string) string { return driverName + "/node" }

// Value is the label value of a node: its name when that is a valid label
// value, else "n-" and a hash of it (node names may be 253 characters,
// label values 63).
func Value(nodeName string) string {
	if len(validation.IsValidLabelValue(nodeName)) == 0 {
		return nodeName
	}
	sum := sha256.Sum256([]byte(nodeName))
	return "n-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:10]))
}

// Selector selects the claims routed to nodeName.
func Selector(driverName, nodeName string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{Label(driverName): Value(nodeName)})
}

// Node returns the node a claim's allocation pins it to, and whether the
// claim has devices of driverName that wait for binding conditions there.
// The node comes from the allocation's node selector when it names exactly
// one node (as node-local ResourceSlices make it), else from the pool of
// the driver's devices (a node daemon's pool is named after its node).
func Node(claim *resourceapi.ResourceClaim, driverName string) (string, bool) {
	alloc := claim.Status.Allocation
	if alloc == nil {
		return "", false
	}
	node, pending := "", false
	for _, r := range alloc.Devices.Results {
		if r.Driver != driverName || len(r.BindingConditions) == 0 {
			continue
		}
		pending = true
		if node == "" {
			node = r.Pool
		}
	}
	if !pending {
		return "", false
	}
	if n := selectedNode(alloc.NodeSelector); n != "" {
		node = n
	}
	return node, true
}

// selectedNode is the one node a node selector names with
// matchFields metadata.name In [node], or "".
func selectedNode(sel *v1.NodeSelector) string {
	if sel == nil || len(sel.NodeSelectorTerms) != 1 {
		return ""
	}
	t := sel.NodeSelectorTerms[0]
	if len(t.MatchExpressions) != 0 || len(t.MatchFields) != 1 {
		return ""
	}
	f := t.MatchFields[0]
	if f.Key != "metadata.name" || f.Operator != v1.NodeSelectorOpIn || len(f.Values) != 1 {
		return ""
	}
	return f.Values[0]
}
