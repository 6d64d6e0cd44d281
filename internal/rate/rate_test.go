package rate

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/table"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Rate
		err  string
	}{
		{"10/1m", Rate{10, time.Minute}, ""},
		{" 100 / 1h ", Rate{100, time.Hour}, ""},
		{"3000/7h", Rate{3000, 7 * time.Hour}, ""},
		{"10/0s", Rate{}, "window 0s"},
		{"10/-1m", Rate{}, "window -1m0s"},
		{"0/1m", Rate{}, "count 0"},
		{"-5/1m", Rate{}, "count -5"},
		{"3001/1h", Rate{}, "count 3001"},
		{"10/8d", Rate{}, `"8d" is not a duration`},
		{"10/200h", Rate{}, "window 200h0m0s"},
		{"ten/1m", Rate{}, "COUNT/WINDOW"},
		{"10", Rate{}, "COUNT/WINDOW"},
		{"", Rate{}, "COUNT/WINDOW"},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := Parse(c.in)
			if c.err != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Parse(%q) = %v, %v; want an error naming %q", c.in, got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
			}
		})
	}
}

// clock is a settable time for the limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// The window slides: Count starts, then a wait until the oldest leaves
// (plus the margin), then one more — never more than Count in any window.
func TestTakeKeepsASlidingWindow(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	l := New(table.NewMemory("", nil), clk.now, time.Second)
	r := Rate{Count: 3, Per: 10 * time.Second}
	var starts []time.Time
	for range 40 {
		wait, at, err := l.Take(ctx, "mail", "", r)
		if err != nil {
			t.Fatal(err)
		}
		if wait == 0 {
			if !at.Equal(clk.now()) {
				t.Fatalf("a start taken at %v said it was recorded at %v", clk.now(), at)
			}
			starts = append(starts, clk.now())
			clk.add(time.Second)
			continue
		}
		if wait < 0 || wait > 11*time.Second {
			t.Fatalf("wait %s", wait)
		}
		clk.add(wait)
	}
	for i := range starts {
		n := 0
		for _, s := range starts[i:] {
			if s.Sub(starts[i]) < r.Per+time.Second {
				n++
			}
		}
		if n > r.Count {
			t.Fatalf("%d starts within %s of %s: %v", n, r.Per, starts[i], starts)
		}
	}
	if len(starts) < 10 {
		t.Fatalf("only %d starts: the budget was not used", len(starts))
	}
	// Keys and types are budgets of their own.
	for _, k := range []struct{ typ, key string }{{"mail", "a"}, {"mail", "b"}, {"sms", ""}} {
		if wait, _, err := l.Take(ctx, k.typ, k.key, r); err != nil || wait != 0 {
			t.Fatalf("%s/%s: wait %s, %v; want its own budget", k.typ, k.key, wait, err)
		}
	}
}

// Workers taking at once: never more than Count starts in the window.
func TestTakeUnderContention(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: t0}
	l := New(table.NewMemory("", nil), clk.now, time.Second)
	r := Rate{Count: 7, Per: time.Minute}
	var wg sync.WaitGroup
	var mu sync.Mutex
	started := 0
	for range 30 {
		wg.Go(func() {
			wait, _, err := l.Take(ctx, "t", "", r)
			if err != nil {
				t.Error(err)
				return
			}
			if wait == 0 {
				mu.Lock()
				started++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if started != r.Count {
		t.Fatalf("%d started at once, want %d", started, r.Count)
	}
}

func TestEncodeDecode(t *testing.T) {
	ts := []time.Time{t0.Add(3 * time.Second), t0, t0.Add(time.Hour)}
	got := decode(encode(ts))
	if len(got) != 3 || !got[0].Equal(t0) || !got[2].Equal(t0.Add(time.Hour)) {
		t.Fatalf("round trip: %v", got)
	}
	for _, bad := range []string{"", "x", "1:", "1:-2", "zz:1,q!"} {
		if got := decode(bad); len(got) != 0 {
			t.Fatalf("decode(%q) = %v", bad, got)
		}
	}
}
