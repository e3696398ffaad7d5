package draplugin

import (
	"context"
	"runtime"

	"google.golang.org/grpc"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
)

// CommitExpecter is implemented by a ClaimPreparer whose prepares and
// unprepares share checkpoint flushes: it is told of a kubelet call's
// claims as the call arrives, before the helper reads them from the API
// server, so that a flush meanwhile can wait for them (state.State.Expect).
type CommitExpecter interface {
	Expect(ctx context.Context, claims int) (context.Context, func())
}

// Expect implements CommitExpecter.
func (c *Claims) Expect(ctx context.Context, claims int) (context.Context, func()) {
	return c.State.Expect(ctx, claims)
}

// expectInterceptor announces each prepare and unprepare call's claims to
// the active claim preparer, when it is a CommitExpecter.
func (d *Driver) expectInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	n := 0
	switch r := req.(type) {
	case *drapbv1.NodePrepareResourcesRequest:
		n = len(r.Claims)
	case *drapbv1.NodeUnprepareResourcesRequest:
		n = len(r.Claims)
	case *drapbv1beta1.NodePrepareResourcesRequest:
		n = len(r.Claims)
	case *drapbv1beta1.NodeUnprepareResourcesRequest:
		n = len(r.Claims)
	}
	if n > 0 && d.isActive() { // d.claims is set once active
		if e, ok := d.claims.(CommitExpecter); ok {
			var end func()
			ctx, end = e.Expect(ctx, n)
			defer end()
			// Calls that reached the plugin together are announced
			// before any of them goes on to commit: this handler lets
			// the others that are runnable announce theirs first, so a
			// flush finds them expected and shares itself with them
			// instead of flushing for one claim. Twice: Go's scheduler
			// now and then runs a yielding goroutine again at once.
			runtime.Gosched()
			runtime.Gosched()
		}
	}
	return handler(ctx, req)
}
