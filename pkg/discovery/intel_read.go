package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// read reads the card of plan p and its ports (see readCard, readPort),
// leaving out a port whose function and id another port has.
func (w *walker) read(p *cardPlan) {
	p.card, p.cardHealth, p.err = w.readCard(p)
	if p.err != nil {
		return
	}
	card := p.cardHealth
	for i := range p.ports {
		port, err := w.readPort(&p.ports[i], p.card, card)
		if err != nil {
			p.portErrs = append(p.portErrs, err)
			continue
		}
		p.card.Ports = append(p.card.Ports, port)
	}
	sort.Slice(p.card.Ports, func(i, j int) bool {
		a, b := p.card.Ports[i], p.card.Ports[j]
		if a.PCIAddress != b.PCIAddress {
			return a.PCIAddress < b.PCIAddress
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Node.Name < b.Node.Name
	})
	// Two ports of one function with one id would be one device name: the
	// API server refuses a slice that has a name twice.
	kept := p.card.Ports[:0]
	for _, port := range p.card.Ports {
		if k := len(kept); k > 0 && kept[k-1].PCIAddress == port.PCIAddress && kept[k-1].ID == port.ID {
			p.portErrs = append(p.portErrs, fmt.Errorf("port %s: id %d on %s is %s's too: both would be device %s", port.Node.SysfsPath, port.ID, port.PCIAddress, kept[k-1].Node.Name, port.DeviceName()))
			continue
		}
		kept = append(kept, port)
	}
	p.card.Ports = kept
	intelAttributes(p.card)
}

// readCard reads a card's fixed fields unless an earlier scan knows them,
// then its interface ID and health.
func (w *walker) readCard(p *cardPlan) (*Card, Health, error) {
	addr := filepath.Base(p.pciPath)
	fme := p.fme
	if fme.path == "" {
		dir, err := w.findFME(p.pciPath)
		if err != nil {
			return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
		}
		if fme, err = openSysDir(dir); err != nil {
			return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
		}
		defer fme.close()
	}
	st, known := w.old.cards[p.fmeKey]
	complete := known
	if !known || p.fmeKey.ino == 0 {
		var err error
		if st, complete, err = w.readCardStatic(p, fme); err != nil {
			return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
		}
	}
	file := st.interfaceIDFile
	if len(p.interfaceIDFiles) > 0 {
		file = p.interfaceIDFiles[0]
	} else if file == "" {
		var err error
		if file, err = w.l.interfaceIDPath(fme.path); err != nil {
			return nil, Health{}, fmt.Errorf("card %s: interface ID: %w", addr, err)
		}
		found := *st
		found.interfaceIDFile = file
		st = &found
	}
	c := st.card
	id, err := fme.readIDPath(file)
	if err != nil {
		return nil, Health{}, fmt.Errorf("card %s: interface ID: %w", addr, err)
	}
	c.InterfaceID, c.interfaceIDFile = id, file
	health, hwmonOK := w.l.cardHealth(&c, fme)
	// What a card's driver had not yet created (it adds hwmon and some
	// attributes late in its probe) or has moved (a rebind renames hwmonN)
	// is looked for again by the next scan.
	if complete && hwmonOK {
		if st.card.tempCrit != c.tempCrit {
			learned := *st
			learned.card.tempCrit = c.tempCrit
			st = &learned
		}
		p.static = st
	}
	return &c, health, nil
}

// readCardStatic reads the fields of a card that do not change while its
// FME exists, and reports whether every one of them was there.
func (w *walker) readCardStatic(p *cardPlan, fme sysDir) (*cardStatic, bool, error) {
	c := Card{Driver: w.l.driver_, PCIAddress: filepath.Base(p.pciPath), PCIPath: p.pciPath, NUMANode: -1}
	var err error
	if c.FME, err = w.devNode(fme); err != nil {
		return nil, false, err
	}
	complete := true
	read := func(name string) string {
		v, err := fme.read(name)
		complete = complete && err == nil
		return v
	}
	c.SocketID = -1
	if n, err := strconv.Atoi(read("socket_id")); err == nil {
		c.SocketID = n
	}
	c.PortsNum, _ = strconv.Atoi(read("ports_num"))
	c.BitstreamID = read("bitstream_id")
	if names, err := fme.sub("hwmon").names(); err == nil && len(names) > 0 {
		sort.Strings(names)
		c.hwmon = fme.path + "/hwmon/" + names[0]
	} else {
		complete = false
	}
	// The FME sits below its PCI function: read the PCI attributes through
	// the directory already open.
	pci, ok := fme.ancestor(p.pciPath)
	if !ok {
		return &cardStatic{card: c}, false, nil
	}
	c.VendorID, _ = pci.read("vendor")
	c.DeviceID, _ = pci.read("device")
	if v, err := pci.read("numa_node"); err == nil {
		if n, err := strconv.Atoi(v); err == nil {
			c.NUMANode = n
		}
	}
	return &cardStatic{card: c}, complete, nil
}

// findFME locates the FME below a physical function's PCI directory, for a
// VF port whose PF is not listed in the class directory.
func (w *walker) findFME(pciPath string) (string, error) {
	parent := filepath.Join(pciPath, w.l.pciChild)
	dirs, err := os.ReadDir(parent)
	if err != nil {
		return "", fmt.Errorf("find FME: %w", err)
	}
	for _, d := range dirs {
		children, err := os.ReadDir(filepath.Join(parent, d.Name()))
		if err != nil {
			continue
		}
		for _, c := range children {
			if strings.HasPrefix(c.Name(), w.l.fmePrefix) {
				return filepath.Join(parent, d.Name(), c.Name()), nil
			}
		}
	}
	return "", fmt.Errorf("no %s* below %s", w.l.fmePrefix, parent)
}

// readPort reads a port's fixed fields unless an earlier scan knows them,
// then its AFU ID and health.
func (w *walker) readPort(pp *portPlan, c *Card, card Health) (*Port, error) {
	st, ok := w.old.ports[pp.key]
	if !ok {
		node, err := w.devNode(pp.dir)
		if err != nil {
			return nil, fmt.Errorf("port %s: %w", pp.dir.path, err)
		}
		v, err := pp.dir.read("id")
		if err != nil {
			return nil, fmt.Errorf("port %s: %w", pp.dir.path, err)
		}
		id, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("port %s: id %q is not a number", pp.dir.path, v)
		}
		st = &portStatic{node: node, id: id}
	}
	pp.static = st
	p := &Port{
		Node:            st.node,
		ID:              st.id,
		PCIAddress:      filepath.Base(pp.pciPath),
		PCIPath:         pp.pciPath,
		VirtualFunction: pp.vf,
	}
	w.l.checkIn(pp.dir, c, card, p, "")
	return p, nil
}
