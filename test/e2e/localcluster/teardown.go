package localcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Down stops every process (newest first) and removes the kubelet's
// mounts, the pods' cgroups, the CNI bridge and the run directory's
// runtime state. The run directory itself (logs) is kept.
func (c *Cluster) Down() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].name == "containerd" {
			killTasks(c.Dir)
		}
		c.procs[i].Stop(15 * time.Second)
	}
	_ = os.Remove(filepath.Join(c.Dir, "pids"))
	if !c.cfg.APIServerOnly { // no node left anything on the host
		cleanupHost(c.Dir)
	}
}

// RemoveRunDir deletes the run's directory, logs included, when Up made it
// (Config.Dir empty); call it after Down once nothing needs the logs (a
// passing run). A directory the caller chose is left alone.
func (c *Cluster) RemoveRunDir() error {
	if c.cfg.Dir != "" {
		return nil
	}
	return os.RemoveAll(c.Dir)
}

// killTasks kills and deletes every container task of the run's containerd
// (the kubelet is already stopped, so nothing restarts them); their shims
// exit with them.
func killTasks(dir string) {
	bin, err := os.ReadFile(filepath.Join(dir, "bin"))
	if err != nil {
		return
	}
	ctr := filepath.Join(strings.TrimSpace(string(bin)), "ctr")
	sock := filepath.Join(dir, "ctd", "containerd.sock")
	out, err := exec.Command(ctr, "--address", sock, "-n", "k8s.io", "tasks", "ls", "-q").Output()
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command(ctr, "--address", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).Run()
		_ = exec.Command(ctr, "--address", sock, "-n", "k8s.io", "tasks", "delete", "-f", id).Run()
	}
}

// DownRecorded ends a detached cluster from another process: the process
// groups recorded in dir, then what the node left on the host.
func DownRecorded(dir string) error {
	err := StopRecorded(dir, 15*time.Second)
	cleanupHost(dir)
	return err
}

// cleanupHost removes what the node of the run in dir left on the host.
func cleanupHost(dir string) {
	// Any process still naming the run directory (a shim whose task
	// outlived containerd).
	if procs, err := os.ReadDir("/proc"); err == nil {
		for _, p := range procs {
			pid, err := strconv.Atoi(p.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline")); err == nil && strings.Contains(string(b), dir+"/") {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// Mounts below the run directory (kubelet volumes, containerd
	// snapshots, netns), deepest first.
	if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				mounts = append(mounts, f[1])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "bridge")); err == nil {
		_ = exec.Command("ip", "link", "delete", strings.TrimSpace(string(b))).Run()
	}
	// Pod cgroups the kubelet created (cgroupfs driver: kubepods).
	for _, base := range []string{"/sys/fs/cgroup"} {
		_ = filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if filepath.Base(path) == "kubepods" {
				removeCgroupTree(path)
				return filepath.SkipDir
			}
			if strings.Count(strings.TrimPrefix(path, base), "/") > 2 {
				return filepath.SkipDir
			}
			return nil
		})
	}
	_ = os.RemoveAll(filepath.Join(dir, "ctd"))
	_ = os.RemoveAll(filepath.Join(dir, "kubelet"))
}

// removeCgroupTree removes empty cgroup directories bottom-up.
func removeCgroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}
