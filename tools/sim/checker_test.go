package sim

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasecron/leasecron"
)

// A replace of a batch member that has started and not ended (snoozing,
// retrying) takes the member's place, as the README says: the batch may
// hear of the replacement's end, a cancel of it under way included (seed
// 14083: a snoozing member replaced and then cancelled; the callback,
// released by the cancel, was taken for early). A replace of a member
// that had already ended is a task of its own.
func TestReplacingAMemberUnderWayTakesItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &World{plan: &Scenario{Config: Config{Start: time.Now()}}, begin: time.Now(), stats: newCoverage(), logs: newRing(10)}
		w.chk = newChecker(w)
		c := w.chk
		b := c.newBatch("b1")
		member := func(id string, outcome string) *ti {
			m := c.newTI(TaskSpec{ID: id, Type: "plain"}, nil, nil)
			m.batch = b
			b.members = append(b.members, m)
			c.scheduled(m, w.now(), leasecron.Item{ID: id, Due: w.now()}, nil)
			m.starts = append(m.starts, &runEv{ti: m, runID: id, due: m.due, attempt: 1, start: w.now(), end: w.now(), outcome: outcome})
			return m
		}
		snoozing, done := member("t1", "snooze"), member("t2", "ok")
		time.Sleep(time.Second)
		replace := func(id string) *ti {
			r := c.newTI(TaskSpec{ID: id, Type: "pausable", Replace: true}, nil, nil)
			c.scheduled(r, w.now(), leasecron.Item{ID: id, Due: w.now().Add(4 * time.Second)}, nil)
			return r
		}
		r1, r2 := replace("t1"), replace("t2")
		if alts := b.alt[snoozing]; len(alts) != 1 || alts[0] != r1 {
			t.Errorf("the replacement of a snoozing member is not in its place: %v", alts)
		}
		if alts := b.alt[done]; len(alts) != 0 {
			t.Errorf("the replacement of a member that succeeded took its place: %v (of %v)", alts, r2)
		}
		time.Sleep(time.Second)
		issued := w.now()
		c.cancelIssued("t1", issued)
		time.Sleep(300 * time.Millisecond)
		c.mu.Lock()
		end, how := c.memberEnd(b, snoozing, w.now())
		c.mu.Unlock()
		if !end.Equal(issued) || how != howBeingCancelled {
			t.Errorf("the snoozing member, its replacement being cancelled, ended at %s (%s); want %s, %s", c.at(end), how, c.at(issued), howBeingCancelled)
		}
	})
}
