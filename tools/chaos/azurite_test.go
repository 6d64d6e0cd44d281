//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// TestAzuriteRestart is scenario 3: Azurite is restarted under load —
// gracefully, then twice by SIGKILL — on the same ports and data while
// three workers keep running and tasks keep being scheduled (one every
// 100 ms, retried until acknowledged). The workers must retry with
// backoff and catch up; nothing acknowledged and kept by Azurite may be
// lost.
func TestAzuriteRestart(t *testing.T) {
	r := newRun(t, "3 Azurite restart and crash", false, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r.waitLeader(ctx, "")
	base := time.Now().Add(5 * time.Second)
	const window = 60 * time.Second
	var items []leasecron.Item
	for _, id := range ids("z", 0, 2400) {
		items = append(items, leasecron.Item{ID: id, Type: "rec", Due: base.Add(time.Duration(rand.Int64N(int64(window))))})
	}
	if failed := r.schedule(ctx, items, 16); len(failed) > 0 {
		t.Fatalf("%d tasks not scheduled", len(failed))
	}
	// The trickle: tasks scheduled while the faults happen.
	var stopTrickle sync.WaitGroup
	trickling := make(chan struct{})
	stopTrickle.Add(1)
	go func() {
		defer stopTrickle.Done()
		for i := 0; ; i++ {
			select {
			case <-trickling:
				return
			case <-time.After(100 * time.Millisecond):
			}
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			r.schedule(sctx, []leasecron.Item{{ID: fmt.Sprintf("t%05d", i), Type: "rec", Due: time.Now().Add(time.Second)}}, 1)
			scancel()
		}
	}()

	type fault struct {
		outage
		kind string
	}
	var outages []fault
	for i, step := range []struct {
		after time.Duration
		kill  bool
	}{{12 * time.Second, false}, {30 * time.Second, true}, {46 * time.Second, true}} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			time.Sleep(time.Until(base.Add(step.after)))
			o := fault{kind: "Azurite restart (SIGTERM, saved)", outage: outage{at: time.Now()}}
			if step.kill {
				o.kind = "Azurite SIGKILL, restarted after 2 s"
				r.f.Azurite.Kill()
				time.Sleep(2 * time.Second)
			}
			if err := r.f.Azurite.Restart(ctx); err != nil {
				t.Fatalf("restart Azurite: %v", err)
			}
			o.back = time.Now()
			if step.kill {
				r.mu.Lock()
				r.kills = append(r.kills, o.outage)
				r.mu.Unlock()
			}
			r.note("%s at %s: storage answered again after %s", o.kind, r.since(o.at), round(o.back.Sub(o.at)))
			outages = append(outages, o)
		})
	}
	time.Sleep(time.Until(base.Add(window)))
	close(trickling)
	stopTrickle.Wait()

	r.waitExecuted(3 * time.Minute)
	a := r.stopAndAnalyse()
	res := Result{RecoveryRule: "from the fault to the first execution that started after storage answered again; takeover: from the fault to the next term of control, when the fault ended one"}
	for i, o := range outages {
		f := Fault{Kind: o.kind, At: r.since(o.at)}
		until := o.at.Add(leaseDuration + 5*time.Second)
		if i+1 < len(outages) && outages[i+1].at.Before(until) {
			until = outages[i+1].at
		}
		if x, ok := FirstStartAfter(a.records, o.back, nil); ok {
			f.Recovery = Duration(x.At.Sub(o.at))
		} else {
			t.Errorf("nothing ran after %s", o.kind)
		}
		// A term that ended after the fault began was ended by it when a
		// new term started soon after.
		detail := fmt.Sprintf("down %s", round(o.back.Sub(o.at)))
		for _, term := range a.terms {
			if term.Start.After(o.at) && term.Start.Before(until) {
				f.Takeover = Duration(term.Start.Sub(o.at))
				detail += fmt.Sprintf("; new term %s gen %d", term.Worker, term.Generation)
				break
			}
		}
		f.Detail = detail
		res.Faults = append(res.Faults, f)
	}
	gens, backwards := GenerationsSeen(a.lease)
	r.note("lease generations seen by the poller: %v", gens)
	if backwards {
		r.note("the lease blob's generation went backwards: Azurite lost the metadata write of an acquisition when it was killed")
	}
	// Azurite reports every lease expired after it restarts. The standbys
	// must leave such a lease to its holder (which renews it) or take it
	// only after the holder's term must have ended: never two in control.
	r.report(a, res, 1)
}
