package schedule

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/table"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

var quiet = slog.New(slog.DiscardHandler)

func newMemClient(t *testing.T, o Options) (*Client, *table.Memory, *clock.Fake) {
	t.Helper()
	mt := table.NewMemory("", nil)
	fc := clock.NewFake(t0)
	if o.Clock == nil {
		o.Clock = fc
	}
	if o.Logger == nil {
		o.Logger = quiet
	}
	c, err := newClient(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	return c, mt, fc
}

func TestValidationRefusesBeforeWriting(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{MaxPayload: 1000, InlineLimit: 100})
	long := strings.Repeat("x", 201)
	cases := []struct {
		name string
		it   Item
		want []string // substrings: the bad value and what is accepted
		is   error
	}{
		{"long id", Item{ID: long, Due: t0}, []string{"201 characters", "limit is 200"}, ErrInvalid},
		{"space", Item{ID: "a b", Due: t0}, []string{`"a b"`, "letters, digits"}, ErrInvalid},
		{"at", Item{ID: "a@b", Due: t0}, []string{`"a@b"`, "'@'"}, ErrInvalid},
		{"tilde", Item{ID: "a~b", Due: t0}, []string{`"a~b"`}, ErrInvalid},
		{"slash", Item{ID: "a/b", Due: t0}, []string{`"a/b"`}, ErrInvalid},
		{"quote", Item{ID: "o'b", Due: t0}, []string{`"o'b"`}, ErrInvalid},
		{"type", Item{ID: "a", Type: "send mail", Due: t0}, []string{`"send mail"`, "1-64 letters"}, ErrInvalid},
		{"no due", Item{ID: "a"}, []string{"no due time", "--at or --in"}, ErrInvalid},
		{"due 10000", Item{ID: "a", Due: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, []string{"10000-01-01", "9999-12-31"}, ErrInvalid},
		{"cron", Item{ID: "a", Due: t0, Recurrence: "61 * * * *"}, []string{`"61 * * * *"`, "5-field cron"}, ErrBadRecurrence},
		{"every", Item{ID: "a", Due: t0, Recurrence: "@every 10 minutes"}, []string{`"10 minutes"`, "Go duration"}, ErrBadRecurrence},
		{"tz", Item{ID: "a", Due: t0, Recurrence: "@daily", TZ: "Europe/Atlantis"}, []string{`"Europe/Atlantis"`, "IANA"}, ErrBadRecurrence},
		{"attempts", Item{ID: "a", Due: t0, MaxAttempts: -1}, []string{"-1", "0 (worker default) .. 1000"}, ErrInvalid},
		{"utf8", Item{ID: "a", Due: t0, Payload: "\xff\xfe"}, []string{"not valid UTF-8", "base64"}, ErrInvalid},
		{"too large", Item{ID: "a", Due: t0, Payload: strings.Repeat("p", 1001)}, []string{"1001 bytes", "limit (payload.max_size) is 1000"}, ErrPayloadTooLarge},
		{"no store", Item{ID: "a", Due: t0, Payload: strings.Repeat("p", 200)}, []string{"inline limit 100", "no payload store"}, ErrPayloadTooLarge},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			_, err := c.Add(ctx(t), tc.it, AddOptions{})
			if !errors.Is(err, tc.is) || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: err = %v, want %v and ErrInvalid", tc.name, err, tc.is)
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not mention %q", tc.name, err, w)
				}
			}
		})
	}
	if n := mt.Calls()["Submit"]; n != 0 {
		t.Fatalf("%d writes after refused input", n)
	}
}

func TestPrepareDefaults(t *testing.T) {
	c, _, fc := newMemClient(t, Options{})
	berlin, _ := time.LoadLocation("Europe/Berlin")
	it, err := c.prepare(Item{Due: t0.In(berlin).Add(123 * time.Nanosecond), Payload: "{}"}, fc.Now())
	if err != nil {
		t.Fatal(err)
	}
	if it.Type != DefaultType || ValidateID(it.ID) != nil || len(it.ID) != 26 {
		t.Fatalf("defaults not filled: %+v", it)
	}
	if it.Due.Location() != time.UTC || !it.Due.Equal(t0.Add(100*time.Nanosecond)) {
		t.Fatalf("due not normalised: %s", it.Due)
	}
	// Generated ids sort by creation time.
	a := newID(fc.Now())
	b := newID(fc.Now().Add(time.Millisecond))
	if !(a < b) || a == newID(fc.Now()) {
		t.Fatalf("ids %s %s not time-sortable and unique", a, b)
	}
	for _, ok := range []string{"nightly_report", "a.b:c-d", "X", strings.Repeat("z", 200), "...", ".a"} {
		t.Run(ok, func(t *testing.T) {
			if err := ValidateID(ok); err != nil {
				t.Errorf("ValidateID(%q): %v", ok, err)
			}
		})
	}
	// "." and ".." cannot be named in a URL path (the API's routes): HTTP
	// clients and servers clean such a segment away.
	for _, bad := range []string{".", ".."} {
		if err := ValidateID(bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "dots alone") {
			t.Errorf("ValidateID(%q): %v; want ErrInvalid naming the dots", bad, err)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Table: "1bad"}, `"1bad"`},
		{Options{Shards: []string{"00", "00"}}, `"00" appears twice`},
		{Options{Shards: []string{"a/b"}}, `"a/b"`},
		{Options{MaxPayload: -1}, "MaxPayload = -1"},
		{Options{MaxPayload: 1 << 30}, "MaxPayload = 1073741824"},
		{Options{InlineLimit: 40000}, "InlineLimit = 40000: want 1 to 32768"},
		{Options{ScanLimit: -2}, "ScanLimit = -2"},
	} {
		t.Run(c.want, func(t *testing.T) {
			_, err := newClient(table.NewMemory("", nil), c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("newClient(%+v) = %v, want error mentioning %q", c.o, err, c.want)
			}
		})
	}
	if _, err := newClient(table.NewMemory("", nil), Options{PayloadStore: payload.NewMemory()}); err != nil {
		t.Fatal(err)
	}
}

func TestParseWhen(t *testing.T) {
	now := t0
	got, err := ParseWhen("2025-01-02T16:04:05.5+01:00", "", now)
	if err != nil || !got.Equal(utc("2025-01-02T15:04:05.5Z")) || got.Location() != time.UTC {
		t.Fatalf("at: %s %v", got, err)
	}
	got, err = ParseWhen("", "2h30m", now)
	if err != nil || !got.Equal(now.Add(150*time.Minute)) {
		t.Fatalf("in: %s %v", got, err)
	}
	got, err = ParseWhen("", "", now)
	if err != nil || !got.Equal(now) {
		t.Fatalf("neither: %s %v", got, err)
	}
	for _, c := range []struct{ at, in, want string }{
		{"2025-01-02T15:04:05", "", "has no zone"},
		{"tomorrow", "", `"tomorrow" is not RFC 3339`},
		{"2025-13-02T15:04:05Z", "", "not RFC 3339"},
		{"", "10 minutes", `"10 minutes" is not a duration`},
		{"", "-5m", "negative"},
		{"2025-01-02T15:04:05Z", "5m", "not both"},
	} {
		t.Run(c.in, func(t *testing.T) {
			_, err := ParseWhen(c.at, c.in, now)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ParseWhen(%q, %q) = %v, want %q", c.at, c.in, err, c.want)
			}
		})
	}
}
