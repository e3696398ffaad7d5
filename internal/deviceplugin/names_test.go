package deviceplugin_test

import (
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
)

func TestParseMode(t *testing.T) {
	for _, s := range []string{"af", "region"} {
		if m, err := deviceplugin.ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "AF", "devel"} {
		if _, err := deviceplugin.ParseMode(s); err == nil {
			t.Errorf("ParseMode(%q) succeeded, want an error", s)
		}
	}
}
