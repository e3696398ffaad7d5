package draplugin_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var claimsResource = resourceapi.SchemeGroupVersion.WithResource("resourceclaims")

// apiServer makes a fake clientset (fake.NewClientset, whose tracker
// manages fields, so server-side apply merges status.devices by its keys
// and field managers as the API server does) behave like the API server
// where the binding worker depends on it and the fake does not:
//
//   - ResourceClaims get a new resourceVersion at every write, and an
//     update or apply that names one is refused with a Conflict unless it
//     is the stored one (the fake tracker neither stamps nor checks them);
//   - an apply to the status of a claim that does not exist fails with
//     NotFound (the fake would create the claim);
//   - watches of ResourceClaims honour their label selector as the watch
//     cache does: a claim that stops matching arrives as Deleted, one that
//     starts matching as Added (the fake's List honours selectors, its
//     Watch does not).
type apiServer struct {
	client *fake.Clientset
	rv     atomic.Int64

	mu sync.Mutex
	// started counts the watches of claims with a label selector (the
	// Binder's) ever started, running those that run; selectedChanged is
	// closed and replaced when they change.
	started, running int
	selectedChanged  chan struct{}
}

func emulateAPIServer(c *fake.Clientset) *apiServer {
	a := &apiServer{client: c, selectedChanged: make(chan struct{})}
	a.rv.Store(1000)
	c.PrependReactor("create", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		claim := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceClaim)
		claim.ResourceVersion = a.nextVersion()
		return false, nil, nil
	})
	c.PrependReactor("update", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		claim := action.(k8stesting.UpdateAction).GetObject().(*resourceapi.ResourceClaim)
		stored, found := a.storedVersion(claim.Namespace, claim.Name)
		if found && claim.ResourceVersion != "" && claim.ResourceVersion != stored {
			return true, nil, conflict(claim.Name)
		}
		claim.ResourceVersion = a.nextVersion()
		return false, nil, nil
	})
	c.PrependReactor("patch", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		patch := action.(k8stesting.PatchActionImpl)
		if patch.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		var obj map[string]any
		if err := json.Unmarshal(patch.Patch, &obj); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		m, _ := obj["metadata"].(map[string]any)
		if m == nil {
			m = map[string]any{}
			obj["metadata"] = m
		}
		stored, found := a.storedVersion(patch.GetNamespace(), patch.GetName())
		if !found && patch.GetSubresource() != "" {
			return true, nil, apierrors.NewNotFound(claimsResource.GroupResource(), patch.GetName())
		}
		if want, _ := m["resourceVersion"].(string); want != "" && want != stored {
			return true, nil, conflict(patch.GetName())
		}
		m["resourceVersion"] = a.nextVersion()
		b, err := json.Marshal(obj)
		if err != nil {
			return true, nil, err
		}
		patch.Patch = b
		return k8stesting.ObjectReaction(c.Tracker())(patch)
	})
	c.PrependWatchReactor("resourceclaims", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w := action.(k8stesting.WatchActionImpl)
		upstream, err := c.Tracker().Watch(claimsResource, w.GetNamespace(), w.ListOptions)
		if err != nil {
			return true, nil, err
		}
		sel := w.WatchRestrictions.Labels
		if sel == nil || sel.Empty() {
			return true, upstream, nil
		}
		return true, a.selectWatch(upstream, sel), nil
	})
	return a
}

func conflict(name string) error {
	return apierrors.NewConflict(claimsResource.GroupResource(), name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

func (a *apiServer) nextVersion() string { return strconv.FormatInt(a.rv.Add(1), 10) }

// storedVersion is the resourceVersion of a stored claim.
func (a *apiServer) storedVersion(namespace, name string) (string, bool) {
	obj, err := a.client.Tracker().Get(claimsResource, namespace, name)
	if err != nil {
		return "", false
	}
	return obj.(*resourceapi.ResourceClaim).ResourceVersion, true
}

// waitSelectedWatches waits until the watches of claims with a label
// selector (a Binder's informer) satisfy ok: how many were started, how
// many run.
func (a *apiServer) waitSelectedWatches(t testing.TB, what string, ok func(started, running int) bool) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		a.mu.Lock()
		started, running, changed := a.started, a.running, a.selectedChanged
		a.mu.Unlock()
		if ok(started, running) {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s: %d selected watches of claims started, %d run", what, started, running)
		}
	}
}

// selectedWatched reports whether a selected watch of claims was
// started.
func (a *apiServer) selectedWatched() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.started > 0
}

// selectedWatch records a selected watch starting (delta 1) or stopping
// (-1).
func (a *apiServer) selectedWatch(delta int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if delta > 0 {
		a.started++
	}
	a.running += delta
	close(a.selectedChanged)
	a.selectedChanged = make(chan struct{})
}

// selectedWatch passes on the events of a watch that concern objects a
// label selector matches.
type selectedWatch struct {
	upstream watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	once     sync.Once
	stopped  func()
}

func (a *apiServer) selectWatch(upstream watch.Interface, sel labels.Selector) watch.Interface {
	w := &selectedWatch{upstream: upstream, out: make(chan watch.Event), stop: make(chan struct{}), stopped: func() { a.selectedWatch(-1) }}
	a.selectedWatch(1)
	go func() {
		defer close(w.out)
		matched := map[types.NamespacedName]bool{}
		for ev := range upstream.ResultChan() {
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
			was, now := matched[key], sel.Matches(labels.Set(m.GetLabels()))
			switch {
			case ev.Type == watch.Deleted && !was, ev.Type != watch.Deleted && !was && !now:
				continue
			case ev.Type == watch.Deleted, !now:
				ev.Type = watch.Deleted
				delete(matched, key)
			case !was:
				ev.Type = watch.Added
				matched[key] = true
			}
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *selectedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *selectedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.upstream.Stop()
		w.stopped()
	})
}
