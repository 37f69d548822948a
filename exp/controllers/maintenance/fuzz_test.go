package maintenance

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// Fuzz target: its seed corpus runs with every `go test`; `go test -fuzz=FuzzMaintenanceWindow
// ./exp/controllers/maintenance` explores (see docs/fuzzing.md).

// A window the webhook admits (ParseWindow reads it, its duration is positive) is, at any moment,
// either open or opens next at a later moment that is itself inside the window; and one that
// never reads is an error, never a window taken as open.
func FuzzMaintenanceWindow(f *testing.F) {
	for _, s := range []struct {
		start, tz string
		minutes   int64
	}{
		{"0 2 * * 6", "Europe/Berlin", 240}, {"*/15 * * * *", "", 5}, {"0 0 29 2 *", "UTC", 60},
		{"0 0 30 2 *", "", 60}, {"@weekly", "America/New_York", 1440}, {"CRON_TZ=UTC 0 2 * * *", "", 60},
		{"30 2 * 3 0", "Europe/London", 90}, {"0 0 1 1 *", "Pacific/Kiritimati", 1}, {"@every 1h", "", 30}, {"@every 1h", "", 120},
	} {
		f.Add(s.start, s.tz, s.minutes, int64(1767225600)) // 2026-01-01
	}
	f.Fuzz(func(t *testing.T, start, tz string, minutes, unix int64) {
		if minutes <= 0 || minutes > 60*24*366 || unix < 0 || unix > 1<<34 {
			return // admission refuses a duration that is not positive; a year of minutes is plenty
		}
		w := expv1.MaintenanceWindow{Start: start, TimeZone: tz, Duration: metav1.Duration{Duration: time.Duration(minutes) * time.Minute}}
		now := time.Unix(unix, 0)
		if _, _, err := ParseWindow(w); err != nil {
			if open, _, werr := windowState([]expv1.MaintenanceWindow{w}, now); werr == nil || open {
				t.Fatalf("window %+v refused by admission (%v) but read as open=%v err=%v", w, err, open, werr)
			}
			return
		}
		open, next, err := windowState([]expv1.MaintenanceWindow{w}, now)
		if err != nil {
			t.Fatalf("window %+v admitted, unreadable at %s: %v", w, now, err)
		}
		if open {
			return
		}
		if next.IsZero() {
			return // never fires again from now (robfig/cron looks five years ahead)
		}
		if !next.After(now) {
			t.Fatalf("window %+v at %s: closed, opening next at %s, not later", w, now, next)
		}
		if o, _, err := windowState([]expv1.MaintenanceWindow{w}, next); err != nil || !o {
			t.Fatalf("window %+v at %s: said to open at %s, where it reads open=%v err=%v", w, now, next, o, err)
		}
	})
}
