package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Shrink reduces a failing scenario to a short one that still breaks the
// same invariant: it removes fault windows, then operations in halves,
// quarters, … down to single ones (delta debugging), keeping each removal
// after which the run still fails. A run's goroutines interleave as Go's
// scheduler has them, so a candidate counts as failing when any of tries
// runs of it fails. It stops after budget of wall-clock time.
func Shrink(t *testing.T, sc *Scenario, invariant string, tries int, budget time.Duration) *Scenario {
	deadline := time.Now().Add(budget)
	fails := func(c *Scenario) bool {
		for range tries {
			if res := Run(t, c); res.violated(invariant) {
				return true
			}
		}
		return false
	}
	best := sc.clone()
	// Faults first: most failures need one or two of them, if any.
	for i := 0; i < len(best.Faults) && time.Now().Before(deadline); {
		c := best.clone()
		c.Faults = append(c.Faults[:i:i], c.Faults[i+1:]...)
		if fails(c) {
			best = c
			continue
		}
		i++
	}
	for n := len(best.Ops) / 2; n >= 1 && time.Now().Before(deadline); n /= 2 {
		for i := 0; i+n <= len(best.Ops) && time.Now().Before(deadline); {
			c := best.clone()
			c.Ops = append(c.Ops[:i:i], c.Ops[i+n:]...)
			if !c.consistent() {
				i += n
				continue
			}
			if fails(c) {
				best = c
				continue
			}
			i += n
		}
	}
	return best
}

func (r *Result) violated(inv string) bool { return r.violatedBy(inv, "") }

// violatedBy reports whether inv was violated with detail among the
// words of the violation's detail ("": any).
func (r *Result) violatedBy(inv, detail string) bool {
	return slices.ContainsFunc(r.Violations, func(v Violation) bool {
		return v.Invariant == inv && strings.Contains(v.Detail, detail)
	})
}

func (sc *Scenario) clone() *Scenario {
	c := *sc
	c.Ops = append([]Op(nil), sc.Ops...)
	c.Faults = append([]FaultWindow(nil), sc.Faults...)
	return &c
}

// consistent reports whether every operation still has what it needs:
// a worker started before it is acted on (the others tolerate a missing
// task: the service answers not found).
func (sc *Scenario) consistent() bool {
	started := map[string]bool{}
	for i := 1; i <= sc.Workers; i++ {
		started[workerName(i)] = true
	}
	for _, op := range sc.Ops {
		switch op.Kind {
		case OpStart:
			started[op.Worker] = true
		case OpKill, OpStop, OpFreeze, OpDrain:
			if !started[op.Worker] {
				return false
			}
		}
	}
	return true
}

// Report formats a failing run for a developer: the seed, the violations,
// how to replay it, and the operations (of the shrunk scenario when there
// is one).
func Report(res *Result, sc *Scenario) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d violation(s)\n", res.Seed, len(res.Violations))
	for i, v := range res.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "  … %d more\n", len(res.Violations)-10)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	api := ""
	if sc.API {
		api = "SIM_API=1 "
	}
	fmt.Fprintf(&b, "replay: %smake sim SEED=%d\n", api, res.Seed)
	b.WriteString(sc.Describe())
	return b.String()
}

// Describe prints a scenario: its fleet, its faults and its operations.
func (sc *Scenario) Describe() string {
	var b strings.Builder
	c := sc.Config
	fmt.Fprintf(&b, "fleet: %d workers, shards %d", c.Workers, c.Shards)
	if c.Switch {
		b.WriteString(" (rolling switch from 1)")
	}
	fmt.Fprintf(&b, ", queues %d (second client %d), start %s, active %v", c.Queues, c.ClientQueues, c.Start.Format(time.RFC3339), c.Active)
	if c.Fast {
		b.WriteString(", fast timings")
	}
	if c.MaxDepth > 0 {
		fmt.Fprintf(&b, ", queue.max_depth %d", c.MaxDepth)
	}
	b.WriteString(c.Board.describe())
	if c.Mutation != "" {
		fmt.Fprintf(&b, ", mutation %s", c.Mutation)
	}
	if c.API {
		b.WriteString(", the second client through the HTTP API")
	}
	b.WriteString("\n")
	for _, f := range sc.Faults {
		who := f.Target
		if who == "" {
			who = "all"
		}
		svc := f.Service
		if svc == "" {
			svc = "every service"
		}
		fmt.Fprintf(&b, "faults %v–%v on %s, %s: busy %.3f dropped %.3f lost %.3f 500 %.3f slow %.3f\n", f.From, f.To, who, svc,
			f.Rates[Busy], f.Rates[Dropped], f.Rates[Lost], f.Rates[Failed500], f.Rates[Slow])
	}
	for _, op := range sc.Ops {
		b.WriteString(op.String())
		b.WriteString("\n")
	}
	return b.String()
}
