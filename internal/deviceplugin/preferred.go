package deviceplugin

import "slices"

// candidateGroup is the available devices of one card.
type candidateGroup struct {
	card  string // PCI address; "" for devices this endpoint does not know
	numa  int
	ids   []string
	order int // first appearance among the available devices
}

// preferred picks size devices from available, mustInclude first, so that
// a container's devices sit on as few cards as possible and then on one
// NUMA node:
//
//  1. cards that already hold a chosen device,
//  2. then cards on a NUMA node already chosen,
//  3. then NUMA nodes that can supply every device still needed,
//  4. then a card that can supply every device still needed (the smallest
//     such card, keeping big ones whole), else the card that supplies most,
//  5. then the order the kubelet listed the devices in.
//
// devs resolves device IDs to cards; unknown IDs are used last. The result
// never has more than max(size, len(mustInclude)) devices.
func preferred(devs map[string]*device, available, mustInclude []string, size int) []string {
	chosen := make([]string, 0, max(size, len(mustInclude)))
	taken := map[string]bool{}
	usedCards := map[string]bool{}
	usedNUMA := map[int]bool{}
	for _, id := range mustInclude {
		if taken[id] {
			continue
		}
		taken[id] = true
		chosen = append(chosen, id)
		if d := devs[id]; d != nil {
			usedCards[d.card.PCIAddress] = true
			usedNUMA[d.card.NUMANode] = true
		}
	}
	need := size - len(chosen)
	if need <= 0 {
		return chosen
	}

	var groups []*candidateGroup
	byCard := map[string]*candidateGroup{}
	numaAvail := map[int]int{}
	for i, id := range available {
		if taken[id] {
			continue
		}
		taken[id] = true
		d := devs[id]
		if d == nil {
			groups = append(groups, &candidateGroup{numa: -2, ids: []string{id}, order: i})
			continue
		}
		g := byCard[d.card.PCIAddress]
		if g == nil {
			g = &candidateGroup{card: d.card.PCIAddress, numa: d.card.NUMANode, order: i}
			byCard[g.card] = g
			groups = append(groups, g)
		}
		g.ids = append(g.ids, id)
		numaAvail[g.numa]++
	}

	for need > 0 && len(groups) > 0 {
		better := func(a, b *candidateGroup) bool {
			type flags struct{ sameCard, sameNUMA, numaFits, fits bool }
			score := func(g *candidateGroup) flags {
				known := g.card != ""
				return flags{
					sameCard: known && usedCards[g.card],
					sameNUMA: known && (len(usedNUMA) == 0 || usedNUMA[g.numa]),
					numaFits: known && numaAvail[g.numa] >= need,
					fits:     known && len(g.ids) >= need,
				}
			}
			sa, sb := score(a), score(b)
			for _, c := range [][2]bool{{sa.sameCard, sb.sameCard}, {sa.sameNUMA, sb.sameNUMA}, {sa.numaFits, sb.numaFits}, {sa.fits, sb.fits}} {
				if c[0] != c[1] {
					return c[0]
				}
			}
			if len(a.ids) != len(b.ids) {
				if sa.fits {
					return len(a.ids) < len(b.ids)
				}
				return len(a.ids) > len(b.ids)
			}
			return a.order < b.order
		}
		best := 0
		for i := 1; i < len(groups); i++ {
			if better(groups[i], groups[best]) {
				best = i
			}
		}
		g := groups[best]
		groups = slices.Delete(groups, best, best+1)
		n := min(need, len(g.ids))
		chosen = append(chosen, g.ids[:n]...)
		need -= n
		if g.card != "" {
			usedCards[g.card] = true
			usedNUMA[g.numa] = true
			numaAvail[g.numa] -= len(g.ids)
		}
	}
	return chosen
}
