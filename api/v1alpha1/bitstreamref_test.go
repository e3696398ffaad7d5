package v1alpha1

import (
	"regexp"
	"strings"
	"testing"
)

const testDigest = "sha256:" + testSHA256

func TestParseBitstreamRef(t *testing.T) {
	tests := []struct {
		in   string
		want BitstreamRef
		// wantErr holds substrings of the error; empty means valid.
		wantErr []string
	}{
		{in: "registry.example.com/accel/nlb0@" + testDigest,
			want: BitstreamRef{Registry: "registry.example.com", Repository: "accel/nlb0", Digest: testDigest}},
		{in: "registry.example.com/accel/nlb0:v2@" + testDigest,
			want: BitstreamRef{Registry: "registry.example.com", Repository: "accel/nlb0", Tag: "v2", Digest: testDigest}},
		{in: "localhost:5000/nlb0@" + testDigest,
			want: BitstreamRef{Registry: "localhost:5000", Repository: "nlb0", Digest: testDigest}},
		{in: "localhost/nlb0@" + testDigest,
			want: BitstreamRef{Registry: "localhost", Repository: "nlb0", Digest: testDigest}},
		{in: "127.0.0.1:5000/a/b/c:1.0_rc-1@" + testDigest,
			want: BitstreamRef{Registry: "127.0.0.1:5000", Repository: "a/b/c", Tag: "1.0_rc-1", Digest: testDigest}},
		{in: "registry:5000/a__b.c--d@" + testDigest,
			want: BitstreamRef{Registry: "registry:5000", Repository: "a__b.c--d", Digest: testDigest}},
		{in: "[::1]:5000/nlb0@" + testDigest,
			want: BitstreamRef{Registry: "[::1]:5000", Repository: "nlb0", Digest: testDigest}},

		{in: "", wantErr: []string{"is empty"}},
		{in: "registry.example.com/accel/nlb0:v2",
			wantErr: []string{"has no digest", "registry.example.com/accel/nlb0:v2@sha256:<64 hex digits", "bitstream push"}},
		{in: "registry.example.com/accel/nlb0", wantErr: []string{"has no digest"}},
		{in: "registry.example.com/accel/nlb0@sha512:" + testSHA256 + testSHA256,
			wantErr: []string{`uses "sha512": only sha256 digests are supported`}},
		{in: "registry.example.com/accel/nlb0@sha256:" + strings.ToUpper(testSHA256),
			wantErr: []string{"is not sha256:<64 hex digits"}},
		{in: "registry.example.com/accel/nlb0@sha256:" + testSHA256[1:], wantErr: []string{"is not sha256:"}},
		{in: "registry.example.com/accel/nlb0@" + testSHA256, wantErr: []string{"is not sha256:"}},
		{in: "accel/nlb0@" + testDigest,
			wantErr: []string{`"accel" is not one`, "registry.example.com/accel/nlb0@"}},
		{in: "nlb0@" + testDigest, wantErr: []string{`"nlb0" is not one`}},
		{in: "/nlb0@" + testDigest, wantErr: []string{`"" is not one`, "registry.example.com/nlb0@"}},
		{in: "-bad.example.com/nlb0@" + testDigest, wantErr: []string{"registry host"}},
		{in: "registry.example.com/Accel/nlb0@" + testDigest, wantErr: []string{`repository "Accel/nlb0" is not a valid repository`}},
		{in: "registry.example.com/accel//nlb0@" + testDigest, wantErr: []string{"is not a valid repository"}},
		{in: "registry.example.com/@" + testDigest, wantErr: []string{`repository ""`}},
		{in: "registry.example.com/accel:x/nlb0@" + testDigest, wantErr: []string{`repository "accel:x/nlb0"`}},
		{in: "registry.example.com/nlb0:.v2@" + testDigest, wantErr: []string{`tag ".v2" is not a valid tag`}},
		{in: "registry.example.com/nlb0:@" + testDigest, wantErr: []string{`tag ""`}},
		{in: "registry.example.com/nlb0:" + strings.Repeat("a", 129) + "@" + testDigest, wantErr: []string{"is not a valid tag"}},
		{in: "registry.example.com/nlb0 @" + testDigest, wantErr: []string{"blank or control character at byte 25"}},
		{in: "registry.example.com/nlb0@" + testDigest + "@" + testDigest, wantErr: []string{"is not sha256:"}},
		{in: "registry.example.com/" + strings.Repeat("a", MaxBitstreamRefLength) + "@" + testDigest, wantErr: []string{"more than 512"}},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseBitstreamRef(tc.in)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("ParseBitstreamRef() error = %v", err)
				}
				if got != tc.want {
					t.Fatalf("ParseBitstreamRef() = %+v, want %+v", got, tc.want)
				}
				if got.String() != tc.in {
					t.Errorf("String() = %q, want the input back", got.String())
				}
				return
			}
			checkErrors(t, err, tc.wantErr)
		})
	}
}

// FuzzParseBitstreamRef checks that ParseBitstreamRef accepts exactly what
// BitstreamRefPattern (the CRD's rule) accepts, and that an accepted
// reference prints back as given.
func FuzzParseBitstreamRef(f *testing.F) {
	for _, seed := range []string{
		"registry.example.com/accel/nlb0:v2@" + testDigest,
		"localhost:5000/nlb0@" + testDigest,
		"[::1]/a@" + testDigest,
		"registry.example.com/accel/nlb0:v2",
		"a/b@sha256:",
		"a.b/c:d:e@" + testDigest,
		"",
	} {
		f.Add(seed)
	}
	pattern := regexp.MustCompile(BitstreamRefPattern)
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseBitstreamRef(s)
		if len(s) <= MaxBitstreamRefLength && pattern.MatchString(s) != (err == nil) {
			t.Fatalf("ParseBitstreamRef(%q) error = %v, but the CRD pattern matches = %v", s, err, pattern.MatchString(s))
		}
		if err == nil && ref.String() != s {
			t.Fatalf("ParseBitstreamRef(%q).String() = %q", s, ref.String())
		}
	})
}

func TestParseBitstreamRepository(t *testing.T) {
	got, err := ParseBitstreamRepository("localhost:5000/accel/nlb0:v2")
	if want := (BitstreamRef{Registry: "localhost:5000", Repository: "accel/nlb0", Tag: "v2"}); err != nil || got != want {
		t.Fatalf("ParseBitstreamRepository() = %+v, %v; want %+v", got, err, want)
	}
	if got.String() != "localhost:5000/accel/nlb0:v2" {
		t.Errorf("String() = %q", got.String())
	}
	if got, err := ParseBitstreamRepository("localhost:5000/accel/nlb0"); err != nil || got.Tag != "" {
		t.Errorf("ParseBitstreamRepository(no tag) = %+v, %v", got, err)
	}
	_, err = ParseBitstreamRepository("localhost:5000/nlb0@" + testDigest)
	checkErrors(t, err, []string{"has a digest", `drop "@sha256:`})
	_, err = ParseBitstreamRepository("accel/nlb0:v2")
	checkErrors(t, err, []string{"registry.example.com/accel/nlb0:v2"})
}
