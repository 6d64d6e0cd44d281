package schedule

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// FuzzParseRecurrence: any rule and zone either parse or are refused with
// ErrBadRecurrence; a parsed rule's next occurrence is strictly after the
// reference, never a panic or a hang.
func FuzzParseRecurrence(f *testing.F) {
	for _, s := range []struct{ rule, tz string }{
		{"@every 10m", ""}, {"@every 1s", "UTC"}, {"@every 0s", ""}, {"@every", ""}, {"@every -1m", ""},
		{"*/15 9-17 * * MON-FRI", "Europe/Berlin"}, {"30 2 * * *", "America/New_York"}, {"0 0 29 2 *", "Asia/Kolkata"},
		{"0 0 31 4 *", ""}, {"61 * * * *", ""}, {"* * * *", ""}, {"@daily", "Local"}, {"@hourly", "Mars/Olympus"},
		{"@yearly", ""}, {"@reboot", ""}, {"0 9 * * 1#2", ""}, {"0 0 L * *", ""}, {"", "Europe/London"},
	} {
		f.Add(s.rule, s.tz, int64(1767225600))
	}
	f.Fuzz(func(t *testing.T, rule, tz string, sec int64) {
		r, err := ParseRecurrence(rule, tz)
		if err != nil {
			if !strings.Contains(err.Error(), ErrBadRecurrence.Error()) {
				t.Fatalf("ParseRecurrence(%q, %q) = %v: not ErrBadRecurrence", rule, tz, err)
			}
			return
		}
		if r.IsZero() {
			return
		}
		ref := time.Unix(sec%(1<<34), 0).UTC() // years 1425–2514
		next, err := r.Next(ref, ref)
		if err != nil {
			return // a rule with no further occurrence (e.g. 31 April) is reported, not looped on
		}
		if !next.After(ref) {
			t.Fatalf("%q in %q: next after %s is %s", rule, tz, ref, next)
		}
	})
}

// FuzzParseWhen: any --at and --in either give a time or a message that
// wraps ErrInvalid.
func FuzzParseWhen(f *testing.F) {
	for _, s := range [][2]string{{"2026-01-02T03:04:05Z", ""}, {"", "90s"}, {"", "-1h"}, {"tomorrow", ""},
		{"2026-01-02T03:04:05", ""}, {"", "1e9h"}, {"2026-01-02T03:04:05+01:00", "1m"}, {"", "9999999999999h"},
		// The zero time, which the schedule reads as no due time.
		{"0001-01-01T00:00:00Z", ""}, {"0001-01-01T01:00:00+01:00", ""}} {
		f.Add(s[0], s[1])
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, at, in string) {
		due, err := ParseWhen(at, in, now)
		if err != nil {
			if !strings.Contains(err.Error(), ErrInvalid.Error()) {
				t.Fatalf("ParseWhen(%q, %q) = %v: not ErrInvalid", at, in, err)
			}
			return
		}
		if due.IsZero() && (at != "" || in != "") {
			t.Fatalf("ParseWhen(%q, %q) accepted a zero time", at, in)
		}
	})
}

// FuzzParseRow: a row of any shape, as another language may write it,
// is read into an item or reported malformed, never a panic; an item read
// without a problem has an id and a valid type.
func FuzzParseRow(f *testing.F) {
	for _, s := range []string{
		`{"PartitionKey":"00","RowKey":"0639000000000000000_job-1","Message":"hello","Type":"mail"}`,
		`{"PartitionKey":"00","RowKey":"0639000000000000000_s","Message":"","Type":"report","Recurrence":"@every 1m","TZ":"Europe/Berlin","Seq":3,"Seq@odata.type":"Edm.Int64","Sent":"abc","SentUntil":"2026-01-02T03:04:05Z","SentUntil@odata.type":"Edm.DateTime"}`,
		`{"PartitionKey":"00","RowKey":"0639000000000000000_p","PayloadBlob":"payloads/p","MaxAttempts":5,"Attempts":"x"}`,
		`{"PartitionKey":"00","RowKey":"!garbage","Message":"m"}`,
		`{"PartitionKey":"00","RowKey":"0639000000000000000_x","Message":7}`,
		`{"PartitionKey":"00","RowKey":"9999999999999999999_x","Message":"m","Type":"Bad Type"}`,
		`{"PartitionKey":"00","RowKey":"0639000000000000000_x","Message":"m","Recurrence":"61 * * * *"}`,
		`{"PartitionKey":"00","RowKey":"0639000000000000000_x","Message":"m","SendingUntil":"garbage","Confirmed":true}`,
		`{}`, `[]`, `null`, `{"RowKey":1}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		e, err := table.Decode([]byte(raw), "")
		if err != nil {
			return
		}
		r, err := parseRow(e)
		it := readItem(e)
		if err != nil {
			if it.Problem == "" {
				t.Fatalf("row %s: malformed (%v) but the item says no problem", raw, err)
			}
			return
		}
		if it.ID == "" || ValidateType(it.Type) != nil {
			t.Fatalf("row %s read without a problem as id %q type %q", raw, it.ID, it.Type)
		}
		_ = r
	})
}

// FuzzParseRowKey: a RowKey that parses formats back to itself.
func FuzzParseRowKey(f *testing.F) {
	for _, s := range []string{"0639000000000000000_job-1", "0000000000000000000_x", "3155378975999999999_x", "9999999999999999999_x", "063900000000000000_x", "0639000000000000000-x", "0639000000000000000_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rk string) {
		due, id, err := ParseRowKey(rk)
		if err != nil {
			return
		}
		back, err := RowKey(due, id)
		if err != nil || back != rk {
			t.Fatalf("ParseRowKey(%q) = %s, %q; formats back to %q (%v)", rk, due, id, back, err)
		}
	})
}

// FuzzListToken: a continuation token List did not return is refused with
// ErrInvalid; one that is accepted names a RowKey the table can be asked
// for, and encodes back to itself.
func FuzzListToken(f *testing.F) {
	for _, s := range []string{"", encodeListToken("0639000000000000000_x"), "garbage", encodeListToken("a\x00b"), encodeListToken("id~x")} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		key, err := decodeListToken(tok)
		if err != nil {
			if !strings.Contains(err.Error(), ErrInvalid.Error()) {
				t.Fatalf("decodeListToken(%q) = %v: not ErrInvalid", tok, err)
			}
			return
		}
		if tok == "" {
			if key != "" {
				t.Fatalf("decodeListToken(\"\") = %q", key)
			}
			return
		}
		if !utf8.ValidString(key) || storage.ValidateKeyPart("key", key) != nil {
			t.Fatalf("decodeListToken(%q) accepted key %q", tok, key)
		}
		if again, err := decodeListToken(encodeListToken(key)); err != nil || again != key {
			t.Fatalf("key %q does not round-trip: %q, %v", key, again, err)
		}
	})
}
