package discovery_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// BenchmarkAttributeFloor measures the least any discovery of a 64-card
// node can cost on this machine: opening, reading and closing each
// attribute file once, relative to directories opened before the timer,
// split over all cores, with no listing, no link resolution and no
// parsing. It calibrates BenchmarkDiscover: a scan cannot be
// faster than the floor of the files it must read.
//
//   - published: the attributes the ResourceSlice carries (FME dev,
//     bitstream_id, socket_id, interface ID, PCI vendor, device and
//     numa_node; port dev, id and afu_id) plus a stat of each port's
//     device node;
//   - scanned: those plus what Scan also reads for health and the model
//     (ports_num, the FME and port error registers, temperature and its
//     critical limit).
func BenchmarkAttributeFloor(b *testing.B) {
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		n := writeNode(b, simnode.Options{Driver: drv, Cards: 64, PortsPerCard: 1})
		res := scan(b, n.Root)
		for _, set := range []string{"published", "scanned"} {
			b.Run(fmt.Sprintf("%s-64/%s", drv, set), func(b *testing.B) {
				cards := floorFiles(b, res, set == "scanned")
				defer func() {
					for _, c := range cards {
						for _, f := range c {
							_ = unix.Close(f.dirfd)
						}
					}
				}()
				workers := runtime.GOMAXPROCS(0)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					var wg sync.WaitGroup
					for w := range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							var buf [4096]byte
							var st unix.Stat_t
							for i := w; i < len(cards); i += workers {
								for _, f := range cards[i] {
									if f.stat {
										if err := unix.Fstatat(f.dirfd, f.name, &st, 0); err != nil {
											panic(err)
										}
										continue
									}
									fd, err := unix.Openat(f.dirfd, f.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
									if err != nil {
										panic(err)
									}
									if _, err := unix.Read(fd, buf[:]); err != nil {
										panic(err)
									}
									_ = unix.Close(fd)
								}
							}
						}()
					}
					wg.Wait()
				}
			})
		}
	}
}

// floorFile is one file a scan reads (or, with stat, a device node it
// stats), named relative to its directory's open descriptor.
type floorFile struct {
	dirfd int
	name  string
	stat  bool
}

// floorFiles lists, per card, the files of the given set with their parent
// directories open.
func floorFiles(b *testing.B, res *discovery.Result, scanned bool) [][]floorFile {
	b.Helper()
	glob := func(pattern string) string {
		m, err := filepath.Glob(pattern)
		if err != nil || len(m) != 1 {
			b.Fatalf("glob %s: %v %v", pattern, m, err)
		}
		return m[0]
	}
	var out [][]floorFile
	for _, c := range res.Cards {
		fme := c.FME.SysfsPath
		paths := []string{
			fme + "/dev", fme + "/bitstream_id", fme + "/socket_id",
			c.PCIPath + "/vendor", c.PCIPath + "/device", c.PCIPath + "/numa_node",
		}
		var fmeErrors []string
		switch c.Driver {
		case discovery.DriverDFL:
			paths = append(paths, glob(fme+"/dfl-fme-region.*/fpga_region/region*/compat_id"))
			fmeErrors = []string{"fme_errors", "catfatal_errors"}
		case discovery.DriverOPAE:
			paths = append(paths, fme+"/pr/interface_id")
			fmeErrors = []string{"errors", "catfatal_errors"}
		}
		if scanned {
			paths = append(paths, fme+"/ports_num", glob(fme+"/hwmon/hwmon*/temp1_input"), glob(fme+"/hwmon/hwmon*/temp1_crit"))
			for _, e := range fmeErrors {
				paths = append(paths, fme+"/errors/"+e)
			}
		}
		var stats []string
		for _, p := range c.Ports {
			d := p.Node.SysfsPath
			paths = append(paths, d+"/dev", d+"/id", d+"/afu_id")
			if scanned {
				paths = append(paths, d+"/errors/errors")
			}
			stats = append(stats, p.Node.HostPath)
		}
		var files []floorFile
		add := func(path string, stat bool) {
			fd, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatalf("open parent of %s: %v", path, err)
			}
			files = append(files, floorFile{dirfd: fd, name: filepath.Base(path), stat: stat})
		}
		for _, p := range paths {
			add(p, false)
		}
		for _, p := range stats {
			add(p, true)
		}
		out = append(out, files)
	}
	return out
}
