package api

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron"
)

// ReadAuditEvery is how often the calls that change nothing — reads, and
// calls refused before they did anything — are written to the audit log:
// one entry per caller and kind per period, counting each route, so that
// a client polling a task's status costs one audit write a minute, not
// one per poll. Calls that change something get an entry each.
const ReadAuditEvery = time.Minute

// callLog counts the calls that are audited in bulk until the next flush.
type callLog struct {
	mu     sync.Mutex
	counts map[[2]string]map[string]int // (who, action) → what → calls
	since  time.Time
}

// count notes one call by who of kind action ("read" or "refused") on
// what ("GET /api/v1/tasks/{id}"), and writes the counts to the audit log
// when ReadAuditEvery has passed since the last time.
func (s *server) count(who, action, what string) {
	now := s.clk.Now()
	l := &s.calls
	l.mu.Lock()
	if l.counts == nil {
		l.counts, l.since = map[[2]string]map[string]int{}, now
	}
	if len(l.counts) == 0 {
		// The first call of a period: its counts are written at its end
		// even if no other call comes.
		time.AfterFunc(ReadAuditEvery, s.flushIfDue)
	}
	k := [2]string{who, action}
	if l.counts[k] == nil {
		l.counts[k] = map[string]int{}
	}
	l.counts[k][what]++
	var due map[[2]string]map[string]int
	from := l.since
	if now.Sub(l.since) >= ReadAuditEvery {
		due, l.counts, l.since = l.counts, map[[2]string]map[string]int{}, now
	}
	l.mu.Unlock()
	if due != nil {
		go s.flushCalls(due, from, now)
	}
}

// flushIfDue writes the counts when their period has ended.
func (s *server) flushIfDue() {
	now := s.clk.Now()
	l := &s.calls
	l.mu.Lock()
	if len(l.counts) == 0 || now.Sub(l.since) < ReadAuditEvery {
		l.mu.Unlock()
		return
	}
	due, from := l.counts, l.since
	l.counts, l.since = map[[2]string]map[string]int{}, now
	l.mu.Unlock()
	s.flushCalls(due, from, now)
}

// flushCalls writes one audit entry per (who, action) of counts.
func (s *server) flushCalls(counts map[[2]string]map[string]int, from, to time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) }) {
		e := leasecron.AuditEntry{At: to, Who: k[0], Via: "api", Action: k[1], OK: k[1] == "read", Result: callsText(counts[k], from, to)}
		if err := s.c.Audit(ctx, e); err != nil {
			s.log.Warn("recording api reads in the audit log failed", "who", k[0], "err", err)
		}
	}
}

// callsText is "N calls from–to: WHAT ×n, …", the most frequent first.
func callsText(c map[string]int, from, to time.Time) string {
	whats := slices.Collect(maps.Keys(c))
	slices.SortFunc(whats, func(a, b string) int {
		if c[a] != c[b] {
			return c[b] - c[a]
		}
		return strings.Compare(a, b)
	})
	total := 0
	parts := make([]string, len(whats))
	for i, w := range whats {
		total += c[w]
		parts[i] = fmt.Sprintf("%s ×%d", w, c[w])
	}
	return fmt.Sprintf("%d calls %s–%s: %s", total, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), strings.Join(parts, ", "))
}
