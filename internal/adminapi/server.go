package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// SocketMode is the control socket's mode: only root may program.
const SocketMode os.FileMode = 0o600

// maxRequestBytes bounds a request body.
const maxRequestBytes = 64 << 10

// Handler does the work behind the socket. Node is the daemon's; tests use
// fakes.
type Handler interface {
	Program(ctx context.Context, req ProgramRequest) (ProgramResponse, error)
	List(ctx context.Context) (DeviceList, error)
}

// Errors a Handler wraps to choose the HTTP status; errors of package
// state and program are mapped too (see status).
var (
	// ErrBadRequest: the request is malformed (400).
	ErrBadRequest = errors.New("bad request")
	// ErrUnknownDevice: the request names no device of this node (404).
	ErrUnknownDevice = errors.New("unknown device")
	// ErrRefused: the daemon will not do this for this device (403).
	ErrRefused = errors.New("refused")
)

// Server serves a Handler on a unix socket.
type Server struct {
	path string
	lis  net.Listener
	id   os.FileInfo
	srv  *http.Server
}

// Listen creates the socket at path with mode SocketMode, replacing a stale
// one. The socket is bound in a new directory only its owner can enter,
// restricted, and only then moved to path, so it is never reachable with
// looser permissions, whatever the process's umask.
func Listen(ctx context.Context, path string, h Handler) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	private, err := os.MkdirTemp(filepath.Dir(path), "."+filepath.Base(path)+".")
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	// Bound through the directory's descriptor, the name is short
	// whatever the directory: a path a client can reach (sun_path holds
	// 107 bytes) must not fail for the longer temporary one.
	dirfd, err := unix.Open(private, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: open %s: %w", path, private, err)
	}
	lis, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/s", dirfd))
	unix.Close(dirfd)
	if err != nil {
		return nil, fmt.Errorf("control socket: listen on %s: %w", tmp, err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	fail := func(err error) (*Server, error) {
		lis.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(tmp, SocketMode); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	id, err := os.Stat(path)
	if err != nil {
		return fail(err)
	}
	logger := klog.FromContext(ctx).WithValues("socket", path)
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ProgramPath, func(w http.ResponseWriter, r *http.Request) {
		var req ProgramRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, maxRequestBytes))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, fmt.Errorf("%w: decode program request: %v", ErrBadRequest, err))
			return
		}
		ctx := klog.NewContext(r.Context(), logger.WithValues("device", req.Device, "afuID", req.AFUID))
		resp, err := h.Program(ctx, req)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Program request failed")
			writeError(w, err)
			return
		}
		klog.FromContext(ctx).Info("Program request done", "programmed", resp.Programmed, "bitstream", resp.Bitstream)
		writeJSON(w, http.StatusOK, resp)
	})
	mux.HandleFunc("GET "+DevicesPath, func(w http.ResponseWriter, r *http.Request) {
		list, err := h.List(klog.NewContext(r.Context(), logger))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, list)
	})
	return &Server{
		path: path,
		lis:  lis,
		id:   id,
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
	}, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve serves until ctx ends, then stops accepting, lets running requests
// finish for a few seconds, and removes the socket if it is still its own.
func (s *Server) Serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.lis) }()
	select {
	case err := <-done:
		s.removeSocket()
		return fmt.Errorf("control socket %s: %w", s.path, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(shutdown)
	s.removeSocket()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func (s *Server) removeSocket() {
	if fi, err := os.Stat(s.path); err == nil && os.SameFile(fi, s.id) {
		_ = os.Remove(s.path)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, statusOf(err), ErrorResponse{Error: err.Error()})
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnknownDevice), errors.Is(err, program.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrRefused), errors.Is(err, state.ErrNotHeld), errors.Is(err, state.ErrDeviceHeld), errors.Is(err, state.ErrNotProgrammable):
		return http.StatusForbidden
	case errors.Is(err, program.ErrInterfaceMismatch):
		return http.StatusConflict
	case errors.Is(err, state.ErrInProgress):
		return http.StatusGatewayTimeout
	case errors.Is(err, state.ErrDraining):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
