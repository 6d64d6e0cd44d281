// Package timelist is a compact text form of a list of times at
// millisecond precision: "{first unix ms, base 36}:{offsets from it in ms,
// base 36, comma-separated}". The lease's wake note and the rate limiter's
// rows use it.
package timelist

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Encode writes ts sorted (it sorts ts in place); "" for none.
func Encode(ts []time.Time) string {
	if len(ts) == 0 {
		return ""
	}
	slices.SortFunc(ts, time.Time.Compare)
	base := ts[0].UnixMilli()
	var b strings.Builder
	b.WriteString(strconv.FormatInt(base, 36))
	b.WriteByte(':')
	for i, t := range ts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(t.UnixMilli()-base, 36))
	}
	return b.String()
}

// Decode reads Encode's form, sorted, keeping at most the first max
// entries; anything else yields nothing.
func Decode(s string, max int) []time.Time {
	head, list, ok := strings.Cut(s, ":")
	base, err := strconv.ParseInt(head, 36, 64)
	if !ok || err != nil || list == "" {
		return nil
	}
	parts := strings.Split(list, ",")
	out := make([]time.Time, 0, min(len(parts), max))
	for _, p := range parts[:min(len(parts), max)] {
		off, err := strconv.ParseInt(p, 36, 64)
		if err != nil || off < 0 || base+off < base {
			return nil
		}
		out = append(out, time.UnixMilli(base+off))
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}
