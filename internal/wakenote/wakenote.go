// Package wakenote is the wire form of the leader's wake note: the due
// times of the messages it has enqueued early, carried in the lease blob's
// metadata (trafficcop.Options.Note) so that every worker's consumer looks
// for work at those times, also after the leader dies.
package wakenote

import (
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/timelist"
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

// Encode renders due times (sorted) as "wake1:" and their timelist form.
func Encode(dues []time.Time) string {
	if len(dues) == 0 {
		return ""
	}
	return prefix + timelist.Encode(dues)
}

// Decode parses Encode's form, sorted; anything else yields nothing.
// (Encode's offsets are from the earliest time; a note written otherwise
// by hand or by another release is still read in due order.)
func Decode(s string) []time.Time {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return nil
	}
	return timelist.Decode(rest, Max)
}
