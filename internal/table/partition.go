package table

import (
	"fmt"
	"hash/fnv"
	"strconv"
)

// Partitions spreads keys over a fixed list of PartitionKeys by a hash of
// the key: FNV-1a (32 bits) of the key's UTF-8 bytes, modulo the number of
// partitions, indexes the list. It is how the schedule picks a task's
// shard and the run records a run's bucket; programs in other languages
// compute the same (the README shows how). The zero value has no
// partitions; use NewPartitions or Numbered.
type Partitions struct {
	names []string
}

// NewPartitions returns the partitioner over names (at least one, each
// distinct).
func NewPartitions(names ...string) (Partitions, error) {
	if len(names) == 0 {
		return Partitions{}, fmt.Errorf("no partitions")
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return Partitions{}, fmt.Errorf("partition %q appears twice", n)
		}
		seen[n] = true
	}
	return Partitions{names: append([]string(nil), names...)}, nil
}

// Numbered returns n partitions named prefix followed by 0 .. n−1, padded
// with zeros to width digits (width 0: no padding).
func Numbered(prefix string, n, width int) Partitions {
	names := make([]string, n)
	for i := range names {
		s := strconv.Itoa(i)
		for len(s) < width {
			s = "0" + s
		}
		names[i] = prefix + s
	}
	return Partitions{names: names}
}

// Hash is the hash that places a key: FNV-1a, 32 bits.
func Hash(key string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32()
}

// Of returns the partition of key.
func (p Partitions) Of(key string) string {
	if len(p.names) == 1 {
		return p.names[0]
	}
	return p.names[Hash(key)%uint32(len(p.names))]
}

// Names returns every partition, in order.
func (p Partitions) Names() []string { return append([]string(nil), p.names...) }

// Len returns the number of partitions.
func (p Partitions) Len() int { return len(p.names) }
