package discovery

// Unexported parts the external tests use.
var (
	RescanOnReturn = rescanOnReturn
	TimedOut       = timedOut
)
