package queue

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"unicode/utf8"
)

// Fairness lanes.
const (
	// DefaultFairLanes is ClientOptions.FairLanes' default.
	DefaultFairLanes = 8
	// MaxFairLanes is the most fairness lanes a route has.
	MaxFairLanes = 64
	// MaxFairKeyLen is the longest fair key, in bytes.
	MaxFairKeyLen = 128
)

// ValidateFairKey checks a fair key: up to 128 bytes of UTF-8 without
// control characters ("" is no key).
func ValidateFairKey(key string) error {
	if len(key) > MaxFairKeyLen {
		return fmt.Errorf("fair key %.40q… is %d bytes; the limit is %d", key, len(key), MaxFairKeyLen)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("fair key %q is not valid UTF-8", key)
	}
	for _, r := range key {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fmt.Errorf("fair key %q contains control character U+%04X", key, r)
		}
	}
	return nil
}

// lanes maps fair keys to the lanes of a route: lane 0 carries the
// messages without a key; each weighted key has a lane of its own, 1 to
// len(weighted), in the order of the keys; every other key hashes (FNV-1a)
// into the lanes after those. Every client of a fleet must agree on it.
type lanes struct {
	n      int
	own    map[string]int // weighted key → its lane
	weight map[int]int    // lane → weight (1 when absent)
}

func newLanes(n int, weights map[string]int) lanes {
	l := lanes{n: n, own: map[string]int{}, weight: map[int]int{}}
	for i, k := range slices.Sorted(maps.Keys(weights)) {
		l.own[k] = i + 1
		l.weight[i+1] = weights[k]
	}
	return l
}

// of returns the lane of key.
func (l lanes) of(key string) int {
	if key == "" || l.n <= 1 {
		return 0
	}
	if lane, ok := l.own[key]; ok {
		return lane
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	first := len(l.own) + 1
	return first + int(h.Sum32()%uint32(l.n-first+1))
}

// weightOf returns lane's weight.
func (l lanes) weightOf(lane int) int {
	if w, ok := l.weight[lane]; ok {
		return w
	}
	return 1
}

// validateLanes checks ClientOptions.FairLanes and FairWeights.
func validateLanes(n int, weights map[string]int) error {
	if n < 1 || n > MaxFairLanes {
		return fmt.Errorf("%w: ClientOptions.FairLanes = %d: want 1 to %d", ErrInvalidOptions, n, MaxFairLanes)
	}
	if len(weights) > n-1 {
		return fmt.Errorf("%w: ClientOptions.FairWeights names %d keys: want at most FairLanes-1 = %d (each has a lane of its own)", ErrInvalidOptions, len(weights), n-1)
	}
	for k, w := range weights {
		if err := ValidateFairKey(k); err != nil || k == "" {
			return fmt.Errorf("%w: ClientOptions.FairWeights: key %q: want a fair key of 1 to %d bytes", ErrInvalidOptions, k, MaxFairKeyLen)
		}
		if w < 1 || w > 1000 {
			return fmt.Errorf("%w: ClientOptions.FairWeights[%q] = %d: want 1 to 1000", ErrInvalidOptions, k, w)
		}
	}
	return nil
}
