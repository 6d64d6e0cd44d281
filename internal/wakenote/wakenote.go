// Package wakenote is the wire form of the leader's wake note: the due
// times of the messages it has enqueued early, carried in the lease blob's
// metadata (trafficcop.Options.Note) so that every worker's consumer looks
// for work at those times, also after the leader dies.
package wakenote

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// The leader publishes, in the lease metadata with every
// renewal (trafficcop.Options.Note), when the messages it has enqueued early
// come due; every other worker's consumer looks for work at those times. If
// the leader dies, its tasks still start on time although no consumer is
// told by the mover any more, and however far the others' polling has
// backed off.
const (
	prefix = "wake1:"
	// Max bounds the due times in one note (each takes about five
	// bytes; trafficcop.MaxNote is 2 KiB).
	Max = 300
)

// Encode renders due times (sorted) as "wake1:{first unix ms in
// base 36}:{offsets from it in ms, base 36, comma-separated}".
func Encode(dues []time.Time) string {
	if len(dues) == 0 {
		return ""
	}
	base := dues[0].UnixMilli()
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(strconv.FormatInt(base, 36))
	b.WriteByte(':')
	for i, d := range dues {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d.UnixMilli()-base, 36))
	}
	return b.String()
}

// Decode parses Encode's form, sorted; anything else yields nothing.
// (Encode's offsets are from the earliest time; a note written otherwise
// by hand or by another release is still read in due order.)
func Decode(s string) []time.Time {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return nil
	}
	head, list, ok := strings.Cut(rest, ":")
	base, err := strconv.ParseInt(head, 36, 64)
	if !ok || err != nil || list == "" {
		return nil
	}
	parts := strings.Split(list, ",")
	out := make([]time.Time, 0, min(len(parts), Max))
	for _, p := range parts[:min(len(parts), Max)] {
		off, err := strconv.ParseInt(p, 36, 64)
		if err != nil || off < 0 || base+off < base {
			return nil
		}
		out = append(out, time.UnixMilli(base+off))
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}
