package shard

import (
	"sort"
	"time"
)

// Plan returns the rows that change when shards are shared among the live
// members by a balancer of generation gen at now: max − min shards per
// live member ≤ 1, moving as few shards as that needs. A shard keeps its
// owner while the owner is live and not above its share; the shards of
// members that are gone, and the excess of members above their share, go
// to the members below theirs. With no live member nothing changes.
// Shards of m that are not in shards are left as they are.
//
// Every shard given to another owner gets a new epoch above both its old
// one and every epoch of an earlier generation. A shard taken from a live
// owner names it in From, and its new owner waits for that owner to let
// go; a From naming a member no longer live is cleared.
func Plan(m Map, shards []string, live []string, gen int64, now time.Time) []Assignment {
	if len(live) == 0 || len(shards) == 0 {
		return nil
	}
	isLive := make(map[string]bool, len(live))
	for _, l := range live {
		isLive[l] = true
	}
	members := uniqueSorted(live)
	held := map[string][]string{} // member → its shards, in shard order
	var pool []string             // shards to place
	for _, s := range uniqueSorted(shards) {
		a, ok := m.Shards[s]
		if ok && isLive[a.Owner] {
			held[a.Owner] = append(held[a.Owner], s)
		} else {
			pool = append(pool, s)
		}
	}
	// Shares: base each, one more for the first `extra` members in the
	// order of how many they hold now (most first), so that members
	// already holding the larger share keep it.
	n := len(shards)
	base, extra := n/len(members), n%len(members)
	order := append([]string(nil), members...)
	sort.SliceStable(order, func(i, j int) bool { return len(held[order[i]]) > len(held[order[j]]) })
	share := make(map[string]int, len(members))
	for i, mem := range order {
		share[mem] = base
		if i < extra {
			share[mem]++
		}
	}
	for _, mem := range members {
		if k := len(held[mem]); k > share[mem] {
			// Give up the last shards in shard order: deterministic.
			pool = append(pool, held[mem][share[mem]:]...)
			held[mem] = held[mem][:share[mem]]
		}
	}
	sort.Strings(pool)
	var out []Assignment
	moved := map[string]bool{}
	for _, mem := range members {
		for len(held[mem]) < share[mem] && len(pool) > 0 {
			s := pool[0]
			pool = pool[1:]
			held[mem] = append(held[mem], s)
			old := m.Shards[s]
			a := Assignment{Shard: s, Owner: mem, Epoch: nextEpoch(old.Epoch, gen), Since: now, Done: old.Done}
			switch {
			case isLive[old.Owner]:
				a.From = old.Owner
			case isLive[old.From]:
				a.From = old.From // still letting go from an earlier move
			}
			out = append(out, a)
			moved[s] = true
		}
	}
	for _, s := range uniqueSorted(shards) {
		if a, ok := m.Shards[s]; ok && !moved[s] && a.From != "" && !isLive[a.From] {
			a.From = ""
			out = append(out, a)
		}
	}
	return out
}

// nextEpoch is the epoch of a shard whose epoch was old, given by a
// balancer of generation gen.
func nextEpoch(old, gen int64) int64 {
	return max(old+1, gen<<epochShift)
}

func uniqueSorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	j := 0
	for i, s := range out {
		if i == 0 || s != out[i-1] {
			out[j] = s
			j++
		}
	}
	return out[:j]
}
