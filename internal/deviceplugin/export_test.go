package deviceplugin

// LastHandled returns the last device-plugin directory event the sync
// loop handled, how many sync passes had completed then, and how many
// have now.
func LastHandled(p *Plugin) (name string, passAtEvent, passes uint64) {
	if h := p.handled.Load(); h != nil {
		name, passAtEvent = h.name, h.pass
	}
	return name, passAtEvent, p.passes.Load()
}
