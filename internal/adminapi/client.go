package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
)

// Client talks to the daemon's control socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the control socket at path. It connects
// per request.
func NewClient(path string) *Client {
	var d net.Dialer
	return &Client{
		socket: path,
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", path)
			},
			DisableKeepAlives: true,
		}},
	}
}

// Error is an error the daemon answered with.
type Error struct {
	// Status is the HTTP status (see the Err* variables for their meaning).
	Status int
	// Message is the daemon's explanation.
	Message string
}

func (e *Error) Error() string { return e.Message }

// Program asks the daemon to load req.AFUID into req.Device's region and
// waits for it (or for ctx).
func (c *Client) Program(ctx context.Context, req ProgramRequest) (ProgramResponse, error) {
	var resp ProgramResponse
	body, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	return resp, c.do(ctx, http.MethodPost, ProgramPath, body, &resp)
}

// List returns every port of the node with its health and holder.
func (c *Client) List(ctx context.Context) (DeviceList, error) {
	var list DeviceList
	return list, c.do(ctx, http.MethodGet, DevicesPath, nil, &list)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://fpga-dra-driver"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("FPGA driver control socket %s: %w (is the fpga-dra-driver daemon running on this node, and is this the path it was given with --control-socket?)", c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("FPGA driver control socket %s: read answer: %w", c.socket, err)
	}
	if resp.StatusCode/100 != 2 {
		var e ErrorResponse
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%s %s: %s: %q", method, path, resp.Status, data)
		}
		return &Error{Status: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("FPGA driver control socket %s: decode answer: %w", c.socket, err)
	}
	return nil
}
