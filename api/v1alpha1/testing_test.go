package v1alpha1

const (
	testAFUID       = "d8424dc4a4a3c413f89e433683f9040b"
	testAFUIDDashed = "D8424DC4-A4A3-C413-F89E-433683F9040B"
	testInterfaceID = "69528db6eb31577a8c3668f9faa081f6"
	testSHA256      = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	testRef         = "registry.example.com/accel/nlb0:v2@sha256:" + testSHA256
)

// validConfig returns a defaulted config that Validate accepts.
func validConfig() *FpgaConfig {
	return &FpgaConfig{
		TypeMeta:    typeMeta(),
		AFUID:       testAFUID,
		InterfaceID: testInterfaceID,
		Bitstream:   testInterfaceID + "/" + testAFUID + ".gbs",
		SHA256:      testSHA256,
		Programming: ProgrammingIfNeeded,
	}
}
