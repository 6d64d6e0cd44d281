package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestTicksKnownValues(t *testing.T) {
	cases := []struct {
		t    time.Time
		want int64
	}{
		{MinTime, 0},
		{time.Unix(0, 0), 621_355_968_000_000_000},
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), 630_822_816_000_000_000}, // DateTime(2000,1,1).Ticks
		{MaxTime, 3_155_378_975_999_999_999},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := Ticks(c.t); got != c.want {
				t.Errorf("Ticks(%s) = %d, want %d", c.t, got, c.want)
			}
			if back := FromTicks(c.want); !back.Equal(c.t) || back.Location() != time.UTC {
				t.Errorf("FromTicks(%d) = %s, want %s UTC", c.want, back, c.t)
			}
		})
	}
}

func TestRowKeyEdges(t *testing.T) {
	rk, err := RowKey(MinTime, "a")
	if err != nil || rk != "0000000000000000000_a" {
		t.Fatalf("year 1: %q, %v", rk, err)
	}
	rk, err = RowKey(MaxTime, "z")
	if err != nil || rk != "3155378975999999999_z" {
		t.Fatalf("year 9999: %q, %v", rk, err)
	}
	for _, bad := range []time.Time{MaxTime.Add(100 * time.Nanosecond), MinTime.Add(-time.Nanosecond), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := RowKey(bad, "x"); err == nil {
			t.Errorf("RowKey(%s) accepted", bad)
		}
	}
	if _, err := RowKey(time.Now(), ""); err == nil {
		t.Error("empty id accepted")
	}
}

func TestRowKeyPrecisionAndZones(t *testing.T) {
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	a, _ := RowKey(base, "x")
	b, _ := RowKey(base.Add(100*time.Nanosecond), "x")
	c, _ := RowKey(base.Add(99*time.Nanosecond), "x")
	if !(a < b) {
		t.Errorf("100 ns later must sort later: %s vs %s", a, b)
	}
	if a != c {
		t.Errorf("sub-100ns must truncate: %s vs %s", a, c)
	}
	due, _, _ := ParseRowKey(b)
	if !due.Equal(base.Add(100 * time.Nanosecond)) {
		t.Errorf("round trip lost 100 ns: %s", due)
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	ny, _ := time.LoadLocation("America/New_York")
	k1, _ := RowKey(base.In(tokyo), "x")
	k2, _ := RowKey(base.In(ny), "x")
	if k1 != a || k2 != a {
		t.Errorf("zones not normalised: %s %s %s", a, k1, k2)
	}
	due, _, _ = ParseRowKey(k1)
	if due.Location() != time.UTC {
		t.Errorf("ParseRowKey gave %s, want UTC", due.Location())
	}
}

func TestRowKeyLexicalOrderIsTimeOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var times []time.Time
	// Across digit-count changes of the raw tick number.
	for _, tk := range []int64{0, 9, 10, 999_999_999, 1_000_000_000, 99_999_999_999_999_999, 100_000_000_000_000_000, 999_999_999_999_999_999, 1_000_000_000_000_000_000, maxTicks} {
		times = append(times, FromTicks(tk))
	}
	for range 500 {
		times = append(times, FromTicks(r.Int64N(maxTicks+1)))
	}
	keys := make([]string, len(times))
	for i, tm := range times {
		keys[i], _ = RowKey(tm, "id")
		if len(keys[i]) != TickDigits+3 {
			t.Fatalf("key %q is not 19 digits + _id", keys[i])
		}
	}
	idx := make([]int, len(times))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return times[idx[a]].Before(times[idx[b]]) })
	for i := 1; i < len(idx); i++ {
		if keys[idx[i-1]] > keys[idx[i]] {
			t.Fatalf("time order %s < %s but keys %s > %s", times[idx[i-1]], times[idx[i]], keys[idx[i-1]], keys[idx[i]])
		}
	}
}

func TestParseRowKey(t *testing.T) {
	due := time.Date(2025, 1, 2, 3, 4, 5, 600, time.UTC)
	rk, _ := RowKey(due, "my_task_1")
	gotDue, id, err := ParseRowKey(rk)
	if err != nil || !gotDue.Equal(due) || id != "my_task_1" {
		t.Fatalf("ParseRowKey(%q) = %s %q %v", rk, gotDue, id, err)
	}
	for _, bad := range []string{
		"", "abc", "0638712345678901234", "0638712345678901234_", "0638712345678901234-x",
		"063871234567890123a_x", "-638712345678901234_x", "9999999999999999999_x", "063871234567890123_x",
	} {
		t.Run(bad, func(t *testing.T) {
			if _, _, err := ParseRowKey(bad); !errors.Is(err, ErrBadRowKey) {
				t.Errorf("ParseRowKey(%q) err = %v, want ErrBadRowKey", bad, err)
			} else if !strings.Contains(err.Error(), bad) {
				t.Errorf("error %q does not name the key %q", err, bad)
			}
		})
	}
}

func TestDueBound(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at, _ := RowKey(now, "a")
	after, _ := RowKey(now.Add(100*time.Nanosecond), "a")
	b := dueBound(now)
	if !(at < b) || !(after >= b) {
		t.Fatalf("bound %s must include %s and exclude %s", b, at, after)
	}
	if b >= IndexPrefix || b >= FenceRowKey {
		t.Fatal("bound must sort before the bookkeeping rows")
	}
}
