// Package cdi writes the Container Device Interface (CDI) spec files through
// which a container runtime hands allocated FPGA ports to containers.
//
// Each prepared ResourceClaim gets its own spec file, written atomically and
// removed when the claim is unprepared. The spec holds one CDI device per
// allocated port, named "<claimUID>-<deviceName>" so that a name is never
// reused across claims and a runtime's CDI cache cannot serve a stale device.
// A device carries the port's nodes (discovery.Port.Nodes). The card's
// management nodes (an Intel card's FME, an Alveo card's management
// function), which can reprogram or reflash the card, are never handed to a
// container: Device is built from a port only, and its nodes are checked
// against every card family's management nodes.
//
// The spec's container edits, applied once to every container that gets at
// least one of the claim's devices, set these variables, each a
// comma-separated list with one entry per port in the order the devices were
// given:
//
//	FPGA_PORTS          container paths of the port device nodes
//	FPGA_AFU_IDS        accelerator function loaded behind each port
//	FPGA_INTERFACE_IDS  interface ID of each port's region
//	ACCELERATOR_UNITS   PCI address of the function carrying each port
//
// There are no per-port indexed variables: the lists carry the same
// information in one fixed order. The lists describe every port of the
// claim, also when a container is given only some of the claim's requests;
// and when a container gets devices of two claims, each claim's spec sets the
// same variables and the runtime keeps the values of the last one applied.
package cdi
