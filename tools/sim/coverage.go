package sim

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Coverage is what a run (or many, merged) exercised: the operations
// issued, the faults that struck, and which features met in one task or
// one moment. It is printed after make sim so that a gap shows.
type Coverage struct {
	mu       sync.Mutex
	Seeds    int
	Ops      map[string]int
	Faults   map[string]int
	Features map[string]int
	Pairs    map[string]int
	Requests int
	// ByOp counts the storage requests by service and operation.
	ByOp map[string]int
}

func newCoverage() *Coverage {
	return &Coverage{Ops: map[string]int{}, Faults: map[string]int{}, Features: map[string]int{}, Pairs: map[string]int{}, ByOp: map[string]int{}}
}

// NewCoverage returns an empty coverage to merge runs into.
func NewCoverage() *Coverage { return newCoverage() }

func (c *Coverage) op(k OpKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Ops[string(k)]++
}

func (c *Coverage) fault(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Faults[what]++
}

func (c *Coverage) request(kind, op string, f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Requests++
	c.ByOp[op]++
	if f != NoFault {
		c.Faults[f.String()]++
	}
}

// feature records the features one start exercised, and each pair of
// them.
func (c *Coverage) feature(fs []string) { c.record(fs, true) }

// meet records the pairs of features a change met in one live task (a
// cancel of it, for example), without counting them as started.
func (c *Coverage) meet(fs []string) { c.record(fs, false) }

func (c *Coverage) record(fs []string, started bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sort.Strings(fs)
	for i, a := range fs {
		if started {
			c.Features[a]++
		}
		for _, b := range fs[i+1:] {
			c.Pairs[a+" × "+b]++
		}
	}
}

// knownFeatures are the features featureOf, the blackboard and
// World.moment name: one that no run met at all shows in the report's
// gaps too.
var knownFeatures = []string{
	"after", "after-any", "batch", "blackboard", "callback", "cancel", "cron", "due-now", "early", "every",
	"fleet:mixed-shards", "fleet:sharded", "fleet:unsharded", "later", "payload-blob", "progress", "replace", "requeued", "retry", "row",
	"snooze", "storage-faults", "type:callback", "type:limited", "type:pausable", "type:plain", "type:rated",
	"type:slow", "unique",
}

// Merge adds o into c.
func (c *Coverage) Merge(o *Coverage) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Seeds += max(o.Seeds, 1)
	c.Requests += o.Requests
	for _, m := range []struct{ to, from map[string]int }{{c.Ops, o.Ops}, {c.Faults, o.Faults}, {c.Features, o.Features}, {c.Pairs, o.Pairs}, {c.ByOp, o.ByOp}} {
		for k, v := range m.from {
			m.to[k] += v
		}
	}
}

// Print writes the report.
func (c *Coverage) Print(w io.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(w, "coverage of %d seeds, %d storage requests\n", c.Seeds, c.Requests)
	line := func(title string, m map[string]int) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, m[k])
		}
		fmt.Fprintf(w, "  %s: %s\n", title, strings.Join(parts, ", "))
	}
	line("operations", c.Ops)
	line("faults", c.Faults)
	line("features started", c.Features)
	feats := slices.Clone(knownFeatures)
	for f := range c.Features {
		if !slices.Contains(feats, f) {
			feats = append(feats, f)
		}
	}
	sort.Strings(feats)
	var missing []string
	for i, a := range feats {
		for _, b := range feats[i+1:] {
			if c.Pairs[a+" × "+b] == 0 && !exclusive(a, b) {
				missing = append(missing, a+" × "+b)
			}
		}
	}
	fmt.Fprintf(w, "  feature pairs met in one task: %d; never met: %d", len(c.Pairs), len(missing))
	if len(missing) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(missing, "; "))
	}
	fmt.Fprintln(w)
}

// exclusive reports pairs that cannot meet in one task: two types, two
// kinds of due time, what leasecron refuses (a series or a unique task
// waiting for others), and what the scenarios do not make (see
// impossible).
func exclusive(a, b string) bool {
	ka, _, _ := strings.Cut(a, ":")
	kb, _, _ := strings.Cut(b, ":")
	if ka == "type" && kb == "type" || ka == "fleet" && kb == "fleet" && a != "fleet:mixed-shards" && b != "fleet:mixed-shards" {
		return true
	}
	// A blackboard key's run meets only the fleet and its faults.
	if (a == "blackboard") != (b == "blackboard") && ka != "fleet" && kb != "fleet" && a != "storage-faults" && b != "storage-faults" {
		return true
	}
	when := map[string]bool{"every": true, "cron": true, "due-now": true, "early": true, "later": true}
	if when[a] && when[b] {
		return true
	}
	return impossible[a+" × "+b] || impossible[b+" × "+a]
}

// impossible are the pairs leasecron refuses or the planner does not make,
// with the reason.
var impossible = func() map[string]bool {
	m := map[string]bool{}
	for _, group := range []struct {
		a, b []string
		why  string
	}{
		{[]string{"after", "after-any"}, []string{"every", "cron", "unique"}, "refused: a series or a unique task does not wait for others"},
		{[]string{"after"}, []string{"after-any"}, "one or the other"},
		{[]string{"callback", "type:callback"}, []string{"after", "after-any", "batch", "unique", "every", "cron", "replace", "requeued",
			"type:plain", "type:pausable", "type:limited", "type:rated", "type:slow", "early", "later"}, "a batch's callback is its own task, due when the batch ends"},
		{[]string{"batch"}, []string{"every", "cron", "unique"}, "the planner's batches are of one-off tasks without keys"},
		{[]string{"replace"}, []string{"every", "cron", "unique", "after", "after-any"}, "the planner replaces plain one-off tasks"},
		{[]string{"requeued"}, []string{"every", "cron"}, "the planner requeues one-off tasks"},
	} {
		for _, a := range group.a {
			for _, b := range group.b {
				m[a+" × "+b] = true
			}
		}
	}
	return m
}()
