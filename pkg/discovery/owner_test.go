package discovery_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// mknod replaces path by a character device with the given numbers.
func mknod(t *testing.T, path string, major, minor uint32) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o660, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatal(err)
	}
}

// number is a node's major:minor.
func number(n discovery.DevNode) string { return fmt.Sprintf("%d:%d", n.Major, n.Minor) }

// TestPortNumberNotItsOwnIsNotOffered: a port whose dev attribute (and
// /dev node, made to agree with it) names another device's number, the
// FME of another card or another card's port, is no device of its own:
// /sys/dev/char/<number> leads to that other device. Discovery must not
// offer it (a container given it would reach the other card's management
// engine, or share a port), and says why.
func TestPortNumberNotItsOwnIsNotOffered(t *testing.T) {
	for _, victim := range []string{"other card's FME", "other card's port"} {
		t.Run(victim, func(t *testing.T) {
			n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1})
			if n.RegularFiles {
				t.Skip("this process cannot mknod, so the simulated /dev holds regular files")
			}
			before := scan(t, n.Root)
			other := before.Cards[1].FME
			if victim == "other card's port" {
				other = before.Cards[1].Ports[0].Node
			}
			p := n.Cards[0].Ports[0]
			if err := os.WriteFile(filepath.Join(p.SysfsPath, "dev"), []byte(number(other)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			mknod(t, p.DevPath, other.Major, other.Minor)

			res := scan(t, n.Root)
			owner := map[string]string{}
			for _, c := range res.Cards {
				owner[number(c.FME)] = c.FME.SysfsPath
			}
			for _, q := range res.Ports() {
				if o, taken := owner[number(q.Node)]; taken {
					t.Errorf("port %s offered with node %s (%s), the number of %s", q.DeviceName(), q.Node.Path, number(q.Node), o)
				}
				owner[number(q.Node)] = q.Node.SysfsPath
			}
			if !strings.Contains(fmt.Sprint(res.Errors), p.Name) {
				t.Errorf("errors %v do not name %s", res.Errors, p.Name)
			}
		})
	}
}

// TestAlveoUserNodeOfTheManagementPF: a /dev/xfpga node named as the user
// PF's (".u<instance>") that is the management PF's flash node (a symlink
// to it, or a node with its number) must not be handed out with the card:
// the management function can reflash the shell. Its number leads, through
// /sys/dev/char, below the management PF, not the user PF.
func TestAlveoUserNodeOfTheManagementPF(t *testing.T) {
	for _, how := range []string{"symlink", "same number"} {
		t.Run(how, func(t *testing.T) {
			n := writeNode(t, simnode.Options{Alveo: []string{"u55c"}})
			if n.RegularFiles {
				t.Skip("this process cannot mknod, so the simulated /dev holds regular files")
			}
			sc := n.Alveo[0]
			flash, err := filepath.Glob(filepath.Join(n.Root, "dev/xfpga/flash.m*"))
			if err != nil || len(flash) != 1 || len(sc.XfpgaPaths) != 1 {
				t.Fatalf("simulated flash node %v (%v), user nodes %v", flash, err, sc.XfpgaPaths)
			}
			var st unix.Stat_t
			if err := unix.Stat(flash[0], &st); err != nil {
				t.Fatal(err)
			}
			user := sc.XfpgaPaths[0]
			switch how {
			case "symlink":
				if err := os.Remove(user); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Base(flash[0]), user); err != nil {
					t.Fatal(err)
				}
			default:
				mknod(t, user, unix.Major(st.Rdev), unix.Minor(st.Rdev))
			}

			res := scan(t, n.Root)
			for _, p := range res.Ports() {
				for _, node := range p.Nodes() {
					if node.Major == unix.Major(st.Rdev) && node.Minor == unix.Minor(st.Rdev) {
						t.Errorf("device %s hands out %s, which is the management PF's %s (%s)", p.DeviceName(), node.Path, flash[0], number(node))
					}
				}
			}
			if !strings.Contains(fmt.Sprint(res.Errors), filepath.Base(user)) {
				t.Errorf("errors %v do not name %s", res.Errors, filepath.Base(user))
			}
		})
	}
}

// TestDuplicatePortIDs: two ports of one function whose id files say the
// same number would be published under one device name, and the API server
// refuses a slice with a duplicate device name (the node would offer
// nothing). The second is left out, with the cause.
func TestDuplicatePortIDs(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 2})
	p := n.Cards[0].Ports[1]
	if err := os.WriteFile(filepath.Join(p.SysfsPath, "id"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := scan(t, n.Root)
	names := map[string]bool{}
	for _, q := range res.Ports() {
		if names[q.DeviceName()] {
			t.Errorf("device name %s given to two ports", q.DeviceName())
		}
		names[q.DeviceName()] = true
	}
	if len(res.Ports()) != 1 || !strings.Contains(fmt.Sprint(res.Errors), p.Name) {
		t.Errorf("%d ports, errors %v: want one port and an error naming %s", len(res.Ports()), res.Errors, p.Name)
	}
}

// TestErrorRegistersInUpperCase: an error register printed with an
// upper-case prefix ("0X4") has bits set as surely as "0x4": the port is
// unhealthy with the bits as its cause, not read as no error at all.
func TestErrorRegistersInUpperCase(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1})
	if err := n.SetFMEErrors(n.Cards[0], "0X4"); err != nil {
		t.Fatal(err)
	}
	if err := n.SetPortErrors(n.Cards[1].Ports[0], "0X10"); err != nil {
		t.Fatal(err)
	}
	res := scan(t, n.Root)
	for ci, want := range []string{"fme-fme_errors-0x4", "port-errors-0x10"} {
		p := res.Cards[ci].Ports[0]
		if p.Health.Healthy || p.Health.Cause() != want {
			t.Errorf("card %d port %s health %q (cause %q), want unhealthy for %s", ci, p.Node.Name, p.Health, p.Health.Cause(), want)
		}
	}
}
