package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// RowKey layout: {ticks:D19}_{id}. Ticks are .NET ticks: 100 ns units since
// 0001-01-01T00:00:00Z. Zero-padding to 19 digits makes lexical order equal
// time order for every date from year 1 to year 9999.
const (
	// TickDigits is the width of the tick prefix of a RowKey.
	TickDigits = 19
	// unixEpochTicks is the tick count of 1970-01-01T00:00:00Z.
	unixEpochTicks int64 = 621_355_968_000_000_000
	ticksPerSecond int64 = 10_000_000
)

var (
	// MinTime is the earliest due time a RowKey can hold (tick 0).
	MinTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	// MaxTime is the latest due time a RowKey can hold
	// (9999-12-31T23:59:59.9999999Z).
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 999_999_900, time.UTC)
	// maxTicks is Ticks(MaxTime).
	maxTicks = Ticks(MaxTime)
)

// ErrBadRowKey is wrapped by ParseRowKey errors.
var ErrBadRowKey = errors.New("bad RowKey")

// Ticks returns t as .NET ticks (100 ns units since 0001-01-01T00:00:00Z),
// truncating anything finer than 100 ns. The result is only meaningful for
// times between MinTime and MaxTime.
func Ticks(t time.Time) int64 {
	return t.Unix()*ticksPerSecond + int64(t.Nanosecond())/100 + unixEpochTicks
}

// FromTicks is the inverse of Ticks; the result is in UTC.
func FromTicks(ticks int64) time.Time {
	rel := ticks - unixEpochTicks
	sec := rel / ticksPerSecond
	rem := rel % ticksPerSecond
	if rem < 0 {
		sec--
		rem += ticksPerSecond
	}
	return time.Unix(sec, rem*100).UTC()
}

// checkDue reports whether t can be stored in a RowKey. (The zero
// time.Time is 0001-01-01T00:00:00Z, tick 0, and is representable; callers
// that take a due time from users refuse it as "not set".)
func checkDue(t time.Time) error {
	if t.Before(MinTime) || t.After(MaxTime) {
		return fmt.Errorf("due time %s is outside %s .. %s", t.UTC().Format(time.RFC3339Nano), MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339Nano))
	}
	return nil
}

// TickPrefix formats t as the 19-digit, zero-padded tick prefix of a RowKey.
// A RowKey of a row due at or before t sorts before TickPrefix(t + 100 ns).
func TickPrefix(t time.Time) string {
	return fmt.Sprintf("%0*d", TickDigits, Ticks(t))
}

// RowKey returns the RowKey "{ticks:D19}_{id}" of a row due at due. It fails
// when due is outside MinTime..MaxTime or id is empty.
func RowKey(due time.Time, id string) (string, error) {
	if err := checkDue(due); err != nil {
		return "", err
	}
	if id == "" {
		return "", fmt.Errorf("row key: empty id")
	}
	return TickPrefix(due) + "_" + id, nil
}

// ParseRowKey splits a RowKey into its due time (UTC, 100 ns precision) and
// id. It accepts exactly 19 decimal digits, an underscore and a non-empty id.
func ParseRowKey(rk string) (due time.Time, id string, err error) {
	if len(rk) < TickDigits+2 || rk[TickDigits] != '_' {
		return time.Time{}, "", fmt.Errorf("%w %q: want {19-digit ticks}_{id}", ErrBadRowKey, rk)
	}
	digits := rk[:TickDigits]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return time.Time{}, "", fmt.Errorf("%w %q: the first 19 characters must be decimal digits (.NET ticks)", ErrBadRowKey, rk)
		}
	}
	ticks, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || ticks > maxTicks {
		return time.Time{}, "", fmt.Errorf("%w %q: ticks beyond year 9999", ErrBadRowKey, rk)
	}
	return FromTicks(ticks), rk[TickDigits+1:], nil
}
