package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDefault(t *testing.T) {
	tests := []struct {
		name string
		in   FpgaConfig
		want FpgaConfig
	}{
		{
			name: "programming defaults to IfNeeded",
			in:   FpgaConfig{AFUID: testAFUID},
			want: FpgaConfig{AFUID: testAFUID, Programming: ProgrammingIfNeeded},
		},
		{
			name: "explicit programming is kept",
			in:   FpgaConfig{AFUID: testAFUID, Programming: ProgrammingNever},
			want: FpgaConfig{AFUID: testAFUID, Programming: ProgrammingNever},
		},
		{
			name: "IDs and digest are canonicalised",
			in: FpgaConfig{AFUID: testAFUIDDashed, InterfaceID: " 0x" + strings.ToUpper(testInterfaceID) + "\n",
				SHA256: strings.ToUpper(testSHA256)},
			want: FpgaConfig{AFUID: testAFUID, InterfaceID: testInterfaceID, SHA256: testSHA256,
				Programming: ProgrammingIfNeeded},
		},
		{
			name: "a value that is no ID is left for Validate",
			in:   FpgaConfig{AFUID: "NOT-AN-ID", InterfaceID: "1234"},
			want: FpgaConfig{AFUID: "NOT-AN-ID", InterfaceID: "1234", Programming: ProgrammingIfNeeded},
		},
		{
			name: "bitstream is never rewritten",
			in:   FpgaConfig{AFUID: testAFUID, Bitstream: "./A.gbs"},
			want: FpgaConfig{AFUID: testAFUID, Bitstream: "./A.gbs", Programming: ProgrammingIfNeeded},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in
			got.Default()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("Default() mismatch (-want +got):\n%s", diff)
			}
			again := got
			again.Default()
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("Default() is not idempotent (-once +twice):\n%s", diff)
			}
		})
	}
}
