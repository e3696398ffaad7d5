package deviceplugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// KubeletSocket is the name of the kubelet's registration socket in the
// device-plugin directory.
const KubeletSocket = "kubelet.sock"

// maxSocketPath is the longest unix socket path the kernel accepts
// (sun_path is 108 bytes with the terminating NUL).
const maxSocketPath = 107

// fileID identifies one incarnation of a file: a socket that was deleted
// and created again has a new one.
// fileID tells two files at one path apart. The inode alone does not: a
// socket the kubelet re-creates may get the inode its predecessor freed,
// so the change time is part of the identity.
type fileID struct {
	dev, ino uint64
	ctime    unix.Timespec
}

func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, ctime: st.Ctim}, nil
}

// endpointName is the socket file name of a resource: "<domain>-<name>.sock",
// or "<domain>-<sha256(name)[:16]>.sock" when the readable one would make
// the path too long for a unix socket.
func endpointName(dir, domain, name string) string {
	n := domain + "-" + name + ".sock"
	if len(filepath.Join(dir, n)) <= maxSocketPath {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	return domain + "-" + hex.EncodeToString(sum[:8]) + ".sock"
}

// syncLoop keeps every resource served on its socket and registered with
// the current kubelet. It runs on every device change, on every change in
// the device-plugin directory (the kubelet deletes all sockets there when
// it starts and then creates kubelet.sock anew) and every CheckInterval as
// a backstop for missed events and failed registrations. It stops every
// server when ctx ends.
func (p *Plugin) syncLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	var fsEvents <-chan fsnotify.Event
	var fsErrors <-chan error
	if w, err := fsnotify.NewWatcher(); err != nil {
		logger.Error(err, "Cannot watch the device-plugin directory; kubelet restarts are noticed by polling", "dir", p.cfg.Dir, "interval", p.cfg.CheckInterval)
	} else {
		defer w.Close()
		if err := w.Add(p.cfg.Dir); err != nil {
			logger.Error(err, "Cannot watch the device-plugin directory; kubelet restarts are noticed by polling", "dir", p.cfg.Dir, "interval", p.cfg.CheckInterval)
		} else {
			fsEvents, fsErrors = w.Events, w.Errors
		}
	}
	ticker := time.NewTicker(p.cfg.CheckInterval)
	defer ticker.Stop()
	defer p.stopAll()
	// A registration can fail for a moment (kubelet.sock exists from bind()
	// before the kubelet listens on it): retry soon, backing off.
	backoff := minRetry
	var retry <-chan time.Time
	for {
		if p.sync(ctx) {
			retry, backoff = time.After(backoff), min(2*backoff, p.cfg.CheckInterval)
		} else {
			retry, backoff = nil, minRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-retry:
		case <-p.kick:
		case <-ticker.C:
		case ev := <-fsEvents:
			// Whatever changed, the next sync compares every socket and
			// kubelet.sock with what it served and registered with: a
			// new kubelet is a new kubelet.sock (see fileID), so an event
			// that arrives after the registration with it causes none.
			logger.V(5).Info("Device-plugin directory changed", "event", ev)
			p.handled.Store(&handledEvent{name: ev.Name, pass: p.passes.Load()})
		case err := <-fsErrors:
			logger.V(2).Info("Watching the device-plugin directory", "err", err)
		}
	}
}

// handledEvent is the last directory event the sync loop handled and how
// many sync passes had completed then (for tests: every event before it
// was handled, and the pass after it will show what it caused).
type handledEvent struct {
	name string
	pass uint64
}

// minRetry is the first pause before a failed registration is retried.
const minRetry = 100 * time.Millisecond

// sync retires servers of resources that went away, (re)creates missing
// sockets, and registers every server the current kubelet has not seen.
// It reports whether a registration failed and should be retried.
func (p *Plugin) sync(ctx context.Context) (retry bool) {
	logger := klog.FromContext(ctx)
	p.mu.Lock()
	retired := p.retired
	p.retired = nil
	servers := make([]*resourceServer, 0, len(p.servers))
	for _, r := range p.servers {
		servers = append(servers, r)
	}
	p.mu.Unlock()

	for _, r := range retired {
		r.stopServing(filepath.Join(p.cfg.Dir, r.endpoint))
		logger.Info("Stopped advertising resource: no device carries it any more", "resource", r.fullName)
	}
	kubelet, kerr := statID(filepath.Join(p.cfg.Dir, KubeletSocket))
	var register []*resourceServer
	for _, r := range servers {
		path := filepath.Join(p.cfg.Dir, r.endpoint)
		if id, err := statID(path); r.srv == nil || err != nil || id != r.socket {
			if r.srv != nil {
				logger.Info("Device-plugin socket was removed (kubelet restart?); serving it again", "resource", r.fullName, "socket", path)
			}
			if err := r.serve(path); err != nil {
				logger.Error(err, "Cannot serve resource", "resource", r.fullName)
				continue
			}
		}
		if kerr == nil && r.registeredWith != kubelet {
			register = append(register, r)
		}
	}
	// Every resource registers at once: one slow registration must not
	// hold up the others.
	failed := make([]bool, len(register))
	var wg sync.WaitGroup
	for i, r := range register {
		wg.Go(func() {
			if err := p.register(ctx, r); err != nil {
				if ctx.Err() == nil {
					logger.Error(err, "Registration with the kubelet failed; retrying", "resource", r.fullName)
					failed[i] = true
				}
				return
			}
			logger.Info("Registered with the kubelet", "resource", r.fullName, "socket", filepath.Join(p.cfg.Dir, r.endpoint))
		})
	}
	wg.Wait()
	for i, r := range register {
		if failed[i] {
			retry = true
		} else if ctx.Err() == nil {
			r.registeredWith = kubelet
		}
	}
	if kerr != nil {
		logger.V(2).Info("Kubelet registration socket is missing; registering once it appears", "path", filepath.Join(p.cfg.Dir, KubeletSocket))
	}
	p.passes.Add(1)
	return retry
}

// register announces a resource to the kubelet, which then dials the
// resource's socket and calls ListAndWatch.
func (p *Plugin) register(ctx context.Context, r *resourceServer) error {
	path := filepath.Join(p.cfg.Dir, KubeletSocket)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet at %s: %w", path, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RegisterTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     r.endpoint,
		ResourceName: r.fullName,
		Options:      options(),
	})
	if err != nil {
		return fmt.Errorf("register resource %s with the kubelet at %s: %w", r.fullName, path, err)
	}
	return nil
}

// stopAll stops every server and removes its socket.
func (p *Plugin) stopAll() {
	p.mu.Lock()
	servers := p.retired
	p.retired = nil
	for _, r := range p.servers {
		servers = append(servers, r)
	}
	p.mu.Unlock()
	for _, r := range servers {
		r.stopServing(filepath.Join(p.cfg.Dir, r.endpoint))
	}
}
