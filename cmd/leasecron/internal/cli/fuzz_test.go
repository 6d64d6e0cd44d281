package cli

import (
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// FuzzScheduleFileLine: a line of a --file of any text becomes an item
// that passes validation later or is refused with a message, never a
// panic; an item it makes has a due time.
func FuzzScheduleFileLine(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","type":"mail","payload":"hi","in":"1m"}`,
		`{"type":"report","payload":{"x":[1,2]},"cron":"0 9 * * MON-FRI","tz":"Europe/Berlin"}`,
		`{"every":"10m","max_attempts":3}`, `{"at":"2026-01-02T03:04:05Z"}`, `{"at":"tomorrow"}`, `{"in":"1m","at":"2026-01-02T03:04:05Z"}`,
		`{"unique_key":"k","unique_for":"1h","unique_states":"queued,running"}`, `{"unique_for":"1h"}`, `{"unique_key":"k","unique_for":"-1s"}`,
		`{"unknown":1}`, `{} {}`, `[]`, `null`, ``, `{"payload":null}`, `{"max_attempts":-1}`, `{"cron":"61 * * * *"}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, line []byte) {
		it, u, err := parseLine(line, now)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("parseLine(%q): an empty error", line)
			}
			return
		}
		if it.Due.IsZero() {
			t.Fatalf("parseLine(%q) = %+v: no due time", line, it)
		}
		_ = leasecron.Item(it)
		if u != nil && u.Key == "" {
			t.Fatalf("parseLine(%q) made a unique key of nothing", line)
		}
	})
}
