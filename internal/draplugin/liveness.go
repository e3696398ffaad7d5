package draplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// RegistrarSocket is the plugin's registration socket, which the kubelet's
// plugin watcher finds.
func (d *Driver) RegistrarSocket() string {
	if d.cfg.PodUID != "" {
		return filepath.Join(d.cfg.RegistrarDir, kubeletplugin.RollingUpdateRegistrarSocketFile(d.cfg.RegistrarDir, d.cfg.DriverName, d.cfg.PodUID))
	}
	return filepath.Join(d.cfg.RegistrarDir, d.cfg.DriverName+"-reg.sock")
}

// DRASocket is the plugin's DRA service socket.
func (d *Driver) DRASocket() string {
	if d.cfg.PodUID != "" {
		return filepath.Join(d.cfg.PluginDataDir, "dra-"+string(d.cfg.PodUID)+".sock")
	}
	return filepath.Join(d.cfg.PluginDataDir, "dra.sock")
}

// maxSocketPath is the longest unix socket path bind accepts (sun_path is
// 108 bytes with the terminating NUL). The kubeletplugin helper accepts
// 108, so a path of that length fails only at bind, deep in its start.
const maxSocketPath = 107

// checkSocketPaths refuses a configuration whose sockets could not be
// created, naming the flag to change.
func checkSocketPaths(cfg Config) error {
	d := &Driver{cfg: cfg}
	for _, s := range []struct{ path, flag string }{{d.RegistrarSocket(), "--registrar-dir"}, {d.DRASocket(), "--plugin-dir"}} {
		if len(s.path) > maxSocketPath {
			return fmt.Errorf("socket path %s is %d bytes, longer than the %d a unix socket allows: give %s a shorter directory", s.path, len(s.path), maxSocketPath, s.flag)
		}
	}
	return nil
}

// Liveness is a grpc.health.v1 service for the kubelet's gRPC liveness
// probe: it reports SERVING only while the registration socket answers
// GetInfo and the DRA socket answers a NodePrepareResources call with no
// claims, both dialled afresh through their paths, so a deleted or wedged
// socket fails the probe.
type Liveness struct {
	healthpb.UnimplementedHealthServer
	registrarSocket, draSocket string
	// Timeout bounds one check; 5 s when zero.
	Timeout time.Duration
}

// NewLiveness checks the given sockets.
func NewLiveness(registrarSocket, draSocket string) *Liveness {
	return &Liveness{registrarSocket: registrarSocket, draSocket: draSocket}
}

// Check implements grpc.health.v1.
func (l *Liveness) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := l.check(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Liveness check failed")
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// Watch is not offered: probes use Check.
func (l *Liveness) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	return status.Error(codes.Unimplemented, "use Check")
}

func (l *Liveness) check(ctx context.Context) error {
	reg, err := dialUnix(l.registrarSocket)
	if err != nil {
		return err
	}
	defer reg.Close()
	if _, err := registerapi.NewRegistrationClient(reg).GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		return fmt.Errorf("registration socket %s: %w", l.registrarSocket, err)
	}
	dra, err := dialUnix(l.draSocket)
	if err != nil {
		return err
	}
	defer dra.Close()
	if _, err := drapbv1.NewDRAPluginClient(dra).NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{}); err != nil {
		return fmt.Errorf("DRA socket %s: %w", l.draSocket, err)
	}
	return nil
}

// dialUnix connects to a unix socket by path without retrying: a missing
// socket fails at once instead of waiting for the check's deadline.
func dialUnix(path string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(false)),
	)
}

// ServeLiveness serves l on lis until ctx ends.
func ServeLiveness(ctx context.Context, lis net.Listener, l *Liveness) error {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, l)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	klog.FromContext(ctx).Info("Serving gRPC liveness probe", "address", lis.Addr().String())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
