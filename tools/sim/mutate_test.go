//go:build leasecron_mutate

package sim

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leasecron/leasecron/internal/mutate"
)

// catches says which invariant each deliberate defect breaks.
var catches = map[string]string{
	mutate.DropMessage:      InvAtLeastOnce,
	mutate.RerunSucceeded:   InvNoRerun,
	mutate.NoFence:          InvOneMover,
	mutate.CancelNoop:       InvCancelled,
	mutate.UniqueEarly:      InvUnique,
	mutate.AfterFirstParent: InvAfter,
	mutate.CallbackEarly:    InvBatch,
	mutate.NoRate:           InvRate,
	mutate.NoLimit:          InvConcurrency,
	mutate.IgnorePause:      InvPaused,
	mutate.IgnoreDisable:    InvDisabled,
	mutate.BulkRewalk:       InvBulkOnce,
	mutate.EarlyStart:       InvNeverEarly,
	mutate.NoPointers:       InvLookup,
	mutate.SkipOccurrence:   InvOccurrences,
	mutate.TwoAtOnce:        InvNoTwoAtOnce,
	mutate.WrongOutcome:     InvAccepted,
	mutate.NoRelease:        InvAfterLive,
	mutate.BoardTwoAtOnce:   InvBoardOnce,
	mutate.BoardEarly:       InvBoardInterval,
	mutate.BoardRemoveNoop:  InvBoardRemoved,
	mutate.BoardStall:       InvBoardLive,
	mutate.DieEarly:         InvAtLeastOnce,
	mutate.RequeueNoSend:    InvAccepted,
	mutate.RefuseStale:      InvAccepted,
	mutate.KeepOldRow:       InvCancelled,
	mutate.UniqueForever:    InvAccepted,
	mutate.NeverDie:         InvAtLeastOnce,
	mutate.KeepPayload:      InvPayloadGone,
	mutate.DropPayload:      InvPayloadThere,
	mutate.KeepRolledBack:   InvCancelled,
	mutate.EarlyPastDepth:   InvEarlyDepth,
}

// catchesBy names, for the defects whose invariant other checks state
// too, the check that must catch it: a word of its violation's detail.
var catchesBy = map[string]string{
	mutate.DieEarly:       "attempts fail and it has",
	mutate.RequeueNoSend:  "no attempt of it started afterwards",
	mutate.RefuseStale:    "refused as already scheduled",
	mutate.KeepOldRow:     "at its old due time",
	mutate.UniqueForever:  "was refused as a duplicate",
	mutate.NeverDie:       "more than the",
	mutate.KeepRolledBack: "was taken back",
}

// TestMutations shows that the checker is honest: with each deliberate
// defect of internal/mutate switched on, some seed of the fixed set breaks
// the invariant that defect is about (make sim-mutants). Every invariant
// has a defect that breaks it. SIM_MUTATION runs one.
func TestMutations(t *testing.T) {
	covered := map[string]bool{}
	for _, inv := range catches {
		covered[inv] = true
	}
	for _, inv := range Invariants {
		if !covered[inv] {
			t.Errorf("no deliberate defect shows that the checker catches a broken %q", inv)
		}
	}
	names := mutate.All
	if one := os.Getenv("SIM_MUTATION"); one != "" {
		names = []string{one}
	}
	n := envInt(t, "SIM_FIXED", fixedSeeds)
	var report []string
	for _, m := range names {
		want, ok := catches[m]
		if !ok {
			t.Fatalf("defect %q: no invariant named for it", m)
		}
		// Not parallel: the defect is switched on for the whole process.
		mutate.Set(m)
		caught := int64(0)
		var mu sync.Mutex
		t.Run(m, func(t *testing.T) {
			// Seeds two at a time, in order, until one catches it.
			for seed := int64(1); seed <= n && caught == 0; seed += 2 {
				var wg sync.WaitGroup
				for s := seed; s < seed+2 && s <= n; s++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						sc := Plan(s)
						sc.Mutation = m
						var res *Result
						ok := t.Run(strconv.FormatInt(s, 10), func(t *testing.T) { res = Run(t, sc) })
						if !ok || res == nil {
							return
						}
						mu.Lock()
						defer mu.Unlock()
						if res.violatedBy(want, catchesBy[m]) && (caught == 0 || s < caught) {
							caught = s
						}
					}()
				}
				wg.Wait()
			}
			if caught == 0 {
				t.Errorf("defect %s was not caught by %q in seeds 1–%d", m, want, n)
			}
		})
		mutate.Set("")
		report = append(report, m+": caught by seed "+strconv.FormatInt(caught, 10)+" ("+want+")")
	}
	t.Log("\n" + strings.Join(report, "\n"))
}
