package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one component the cluster started.
type Process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// Start runs bin with args, logging to <logDir>/<name>.log, in its own
// process group. When detached is false the process dies with the caller
// (Pdeathsig), so a crashed test leaves nothing running.
func (c *Cluster) Start(name, bin string, args []string, env []string) (*Process, error) {
	logPath := filepath.Join(c.LogDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !c.cfg.Detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	c.logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
	return p, c.writePIDs()
}

// Exited reports whether the process has ended, with its error; a nil
// process (a pod, not a process of this run) never has.
func (p *Process) Exited() (bool, error) {
	if p == nil {
		return false, nil
	}
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop ends the process group: SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if ok, _ := p.Exited(); ok {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Tail returns the last lines of the process log, for error messages.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writePIDs records the running process groups so that "down" from another
// process (make demo-down) can end a detached cluster.
func (c *Cluster) writePIDs() error {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "%d %s\n", p.cmd.Process.Pid, p.name)
	}
	return os.WriteFile(filepath.Join(c.Dir, "pids"), []byte(b.String()), 0o644)
}

// StopRecorded ends the process groups recorded in dir/pids (newest first)
// by PID: SIGTERM, then SIGKILL after grace.
func StopRecorded(dir string, grace time.Duration) error {
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) == 0 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "containerd" {
			killTasks(dir)
		}
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		deadline := time.Now().Add(grace)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // polling another process's exit: no channel exists
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	return os.Remove(filepath.Join(dir, "pids"))
}
