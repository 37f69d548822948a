package names

import (
	"strings"
	"testing"
)

func TestNamesFitAndStayDistinct(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, n := range []string{LabelValue(long), LabelValue(long + "b")} {
		if len(n) > 63 {
			t.Errorf("label value %d characters", len(n))
		}
	}
	if LabelValue(long) == LabelValue(long+"b") || LabelValue("short") != "short" {
		t.Error("label values collide or change a name that fits")
	}
	if a, b := Join(long, "h1", 253), Join(long, "h2", 253); len(a) > 253 || a == b || !strings.HasSuffix(a, "-h1") {
		t.Errorf("joined %q (%d) and %q", a, len(a), b)
	}
	if a := Join(long, "h1", 241); len(a) > 241 {
		t.Errorf("joined %d characters, limit 241", len(a))
	}
	if Join("set", "host", 253) != "set-host" {
		t.Error("a name that fits was changed")
	}
}
