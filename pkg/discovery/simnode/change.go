package simnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Changes to a written node, as the kernel would make them: hot-unplug,
// reprogramming, error bits, a missing driver module.

// Port returns the port with the given kernel name.
func (n *Node) Port(name string) (*Card, *Port, error) {
	for _, c := range n.Cards {
		for _, p := range c.Ports {
			if p.Name == name {
				return c, p, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("simulated node has no port %q", name)
}

// SetAFUID replaces the AFU ID a port reports, atomically (temp file and
// rename), as partial reconfiguration changes it.
func (n *Node) SetAFUID(p *Port, afuID string) error {
	return replaceFile(filepath.Join(p.SysfsPath, "afu_id"), n.id(afuID)+"\n")
}

// SetPortErrors writes a port's errors/errors attribute ("0x0" clears it).
func (n *Node) SetPortErrors(p *Port, value string) error {
	return replaceFile(filepath.Join(p.SysfsPath, "errors", "errors"), value+"\n")
}

// SetFMEErrors writes the card FME's fme_errors (DFL) or errors (OPAE) attribute.
func (n *Node) SetFMEErrors(c *Card, value string) error {
	name := "fme_errors"
	if strings.HasPrefix(c.FMEName, "intel-") {
		name = "errors"
	}
	return replaceFile(filepath.Join(c.FMEPath, "errors", name), value+"\n")
}

// RemoveInterfaceID deletes every compat_id (DFL) or pr/interface_id (OPAE)
// of a card, as happens when dfl_fme_mgr, dfl_fme_br and dfl_fme_region are
// not loaded.
func (n *Node) RemoveInterfaceID(c *Card) error {
	paths, _ := filepath.Glob(filepath.Join(c.FMEPath, "dfl-fme-region.*", "fpga_region", "region*", "compat_id"))
	paths = append(paths, filepath.Join(c.FMEPath, "pr", "interface_id"))
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// SetInterfaceID rewrites the interface ID of every PR region of a card.
func (n *Node) SetInterfaceID(c *Card, id string) error {
	c.InterfaceID = id
	paths, _ := filepath.Glob(filepath.Join(c.FMEPath, "dfl-fme-region.*", "fpga_region", "region*", "compat_id"))
	if strings.HasPrefix(c.FMEName, "intel-") {
		paths = []string{filepath.Join(c.FMEPath, "pr", "interface_id")}
	}
	for _, p := range paths {
		if err := replaceFile(p, n.id(id)+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// RemoveDevNode deletes a port's /dev node, as a crashed driver might.
func (n *Node) RemoveDevNode(p *Port) error { return os.Remove(p.DevPath) }

// RemoveCard hot-unplugs a card: its PCI functions (and VFs), every class,
// bus and /sys/dev/char link that pointed into them, and its /dev nodes
// with their /dev/char links.
// The card keeps its index; later cards keep their addresses.
func (n *Node) RemoveCard(c *Card) error {
	nodes := []string{filepath.Join(n.Root, "dev", c.FMEName)}
	for _, p := range c.Ports {
		nodes = append(nodes, p.DevPath)
	}
	for _, node := range nodes {
		_ = os.Remove(node)
	}
	gone := func(target string) bool {
		return strings.HasPrefix(target, c.PCIPath) ||
			strings.HasPrefix(target, strings.TrimSuffix(c.PCIPath, ".0")+".") ||
			slices.Contains(nodes, target)
	}
	for _, dir := range []string{"sys/class/fpga_region", "sys/class/fpga", "sys/dev/char", "sys/bus/pci/devices", "dev/char"} {
		d := filepath.Join(n.Root, dir)
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			l := filepath.Join(d, e.Name())
			t, err := os.Readlink(l)
			if err != nil {
				continue
			}
			if gone(filepath.Join(d, t)) {
				if err := os.Remove(l); err != nil {
					return err
				}
			}
		}
	}
	siblings, _ := filepath.Glob(strings.TrimSuffix(c.PCIPath, ".0") + ".*")
	for _, s := range siblings {
		if err := os.RemoveAll(s); err != nil {
			return err
		}
	}
	return nil
}

func replaceFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// SetTemperature writes the card FME's hwmon temp1_input (millidegrees).
func (n *Node) SetTemperature(c *Card, milliC int) error {
	dirs, _ := filepath.Glob(filepath.Join(c.FMEPath, "hwmon", "hwmon*"))
	if len(dirs) == 0 {
		return fmt.Errorf("card %s has no hwmon directory", c.PCIAddress)
	}
	return replaceFile(filepath.Join(dirs[0], "temp1_input"), fmt.Sprintf("%d\n", milliC))
}

// Wedge replaces the attribute file at path with a FIFO: opening it for
// reading blocks until a writer comes, as a read of a wedged device does.
// release puts the attribute back as a regular file with its content and
// lets a read stalled on the FIFO return with that content; calls after
// the first do nothing.
func Wedge(path string) (release func() error, err error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil {
		return nil, err
	}
	if err := unix.Mkfifo(path, 0o644); err != nil {
		return nil, fmt.Errorf("wedge %s: %w", path, err)
	}
	var mu sync.Mutex
	released := false
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		if released {
			return nil
		}
		released = true
		return unwedge(path, content)
	}, nil
}

// unwedge is Wedge's release.
func unwedge(path string, content []byte) error {
	// The stalled reader has the FIFO open; the path becomes a regular
	// file again, and the content reaches the reader through the FIFO it
	// already has. Without a reader (ENXIO) there is nothing to release.
	w, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENXIO):
		return replaceFile(path, string(content))
	case err != nil:
		return err
	}
	defer w.Close()
	if err := replaceFile(path, string(content)); err != nil {
		return err
	}
	// EPIPE: the reader gave up meanwhile.
	if _, err := w.Write(content); err != nil && !errors.Is(err, unix.EPIPE) {
		return err
	}
	return w.Close()
}

// SwapPorts re-enumerates two ports of different cards the other way
// round, as the kernel does when their cards are removed and probed again
// in the other order: the DFL and OPAE drivers give a new port the lowest
// free id, and its minor is that id, so each port takes the other's name
// and minor. a and b are the ports' sysfs directories below root. Each
// directory is renamed within its parent, and its dev file and
// /sys/dev/char link follow it; the /dev nodes keep their names and
// numbers, which now belong to the other port. A Node's Port records are
// left as they were.
func SwapPorts(root, a, b string) error {
	devA, err := os.ReadFile(filepath.Join(a, "dev"))
	if err != nil {
		return err
	}
	devB, err := os.ReadFile(filepath.Join(b, "dev"))
	if err != nil {
		return err
	}
	newA := filepath.Join(filepath.Dir(a), filepath.Base(b))
	newB := filepath.Join(filepath.Dir(b), filepath.Base(a))
	if err := os.Rename(a, a+".renumbering"); err != nil {
		return err
	}
	if err := os.Rename(b, newB); err != nil {
		return err
	}
	if err := os.Rename(a+".renumbering", newA); err != nil {
		return err
	}
	n := &Node{Root: root}
	for _, p := range []struct {
		dir string
		dev []byte
	}{{newA, devB}, {newB, devA}} {
		if err := replaceFile(filepath.Join(p.dir, "dev"), string(p.dev)); err != nil {
			return err
		}
		if err := n.link(filepath.Join(root, "sys/dev/char", strings.TrimSpace(string(p.dev))), p.dir); err != nil {
			return err
		}
	}
	return nil
}
