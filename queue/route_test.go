package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

func TestRouteNames(t *testing.T) {
	for _, c := range []struct {
		r    Route
		want string
	}{
		{Route{}, "w"},
		{Route{Queue: "default", Priority: 3}, "w"},
		{Route{Queue: "gpu"}, "w-gpu"},
		{Route{Priority: 1}, "w-p1"},
		{Route{Queue: "gpu", Priority: 4}, "w-gpu-p4"},
		{Route{Queue: "gpu", Priority: 1, Lane: 3}, "w-gpu-p1-k3"},
		{Route{Lane: 12}, "w-k12"},
	} {
		got := RouteBase("w", c.r)
		if got != c.want {
			t.Errorf("RouteBase(w, %+v) = %q, want %q", c.r, got, c.want)
		}
		for i, name := range QueueNames(got, 3) {
			r, idx, ok := ParseRouteName("w", name)
			if !ok || r != c.r.Norm() || idx != i {
				t.Errorf("ParseRouteName(w, %q) = %+v, %d, %v; want %+v, %d", name, r, idx, ok, c.r.Norm(), i)
			}
		}
	}
	for _, name := range []string{"x", "w-", "w-01", "w-p3", "w-p9", "w-gpu-p1-x", "w-Gpu", "w-gpu-0", "w-1-2", "w-k0", "w-k65", "w-k1-p1"} {
		if r, _, ok := ParseRouteName("w", name); ok {
			t.Errorf("ParseRouteName(w, %q) = %+v, want not of the family", name, r)
		}
	}
	for _, bad := range []string{"1gpu", "p1", "p22", "k3", "GPU", "g-pu", "poison", strings.Repeat("a", 21)} {
		if err := ValidateRouteQueue(bad); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("ValidateRouteQueue(%q) = %v, want an error naming it", bad, err)
		}
	}
	for in, want := range map[string]int{"": 0, "1": 1, "critical": 1, "High": 2, "default": 3, "normal": 3, "low": 4, "4": 4} {
		if got, err := ParsePriority(in); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"0", "5", "urgent", "-1"} {
		if _, err := ParsePriority(bad); err == nil || !strings.Contains(err.Error(), "want 1 (critical)") {
			t.Errorf("ParsePriority(%q) = %v, want an error saying what is accepted", bad, err)
		}
	}
}

// memOpener makes MemoryQueues by name, as NewClient makes Azure queues.
type memOpener struct {
	clk clock.Clock
	mu  sync.Mutex
	qs  map[string]*MemoryQueue
}

func (o *memOpener) open(name string) (MessageQueue, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.qs == nil {
		o.qs = map[string]*MemoryQueue{}
	}
	q, ok := o.qs[name]
	if !ok {
		q = NewMemoryQueue(name, o.clk)
		o.qs[name] = q
	}
	return q, nil
}

func (o *memOpener) list(_ context.Context, prefix string) ([]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for name := range o.qs {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	slices.Sort(out) // as Azure lists them
	return out, nil
}

func (o *memOpener) count(name string) int {
	q, _ := o.open(name)
	n, _ := q.Count(context.Background())
	return n
}

func (o *memOpener) dequeues() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, q := range o.qs {
		n += q.opCounts()["dequeue"]
	}
	return n
}

func routedClient(t *testing.T, o ClientOptions) (*Client, *memOpener, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	o.Queue, o.Clock = "wrk", clk
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	mo := &memOpener{clk: clk}
	c, err := newRoutedClient(mo.open, o)
	if err != nil {
		t.Fatal(err)
	}
	c.list = mo.list
	return c, mo, clk
}

// Messages go to the route the envelope names, else their type's, else
// the default queue (whose messages are the bytes earlier releases sent:
// no queue or priority field).
func TestClientSendsByRoute(t *testing.T) {
	ctx := context.Background()
	c, mo, _ := routedClient(t, ClientOptions{Queues: 2, Routes: map[string]Route{"mail": {Queue: "bulk", Priority: PriorityLow}, "page": {Priority: PriorityCritical}}})
	send := func(env Envelope) {
		t.Helper()
		if err := c.Enqueue(ctx, env, 0); err != nil {
			t.Fatal(err)
		}
	}
	send(Envelope{ID: "a", Type: "plain"})
	send(Envelope{ID: "b", Type: "mail"})
	send(Envelope{ID: "c", Type: "mail", Priority: PriorityHigh})
	send(Envelope{ID: "d", Type: "page"})
	send(Envelope{ID: "e", Type: "plain", Queue: "gpu", Priority: PriorityCritical})
	send(Envelope{ID: "f", Type: "page"})
	for name, want := range map[string]int{"wrk": 1, "wrk-bulk-p4": 1, "wrk-bulk-p2": 1, "wrk-p1": 1, "wrk-p1-1": 1, "wrk-gpu-p1": 1} {
		if got := mo.count(name); got != want {
			t.Errorf("queue %s holds %d, want %d", name, got, want)
		}
	}
	plain, _ := mo.qs["wrk"].Peek(ctx, 1)
	if strings.Contains(plain[0].Text, `"queue"`) || strings.Contains(plain[0].Text, `"priority"`) {
		t.Errorf("a default-route message carries route fields: %s", plain[0].Text)
	}
	mail, _ := mo.qs["wrk-bulk-p4"].Peek(ctx, 1)
	if env, _ := DecodeEnvelope(mail[0].Text); env.Queue != "bulk" || env.Priority != PriorityLow {
		t.Errorf("the mail message says queue %q priority %d, want bulk 4", env.Queue, env.Priority)
	}
	err := c.Enqueue(ctx, Envelope{ID: "x", Type: "plain", Queue: "Bad"}, 0)
	if err == nil || !strings.Contains(err.Error(), `"Bad"`) {
		t.Fatalf("enqueue to queue Bad = %v, want a refusal naming it", err)
	}
}

// fill enqueues n messages named prefix-i to the queue called name.
func fill(t *testing.T, mo *memOpener, name, prefix string, n int) {
	t.Helper()
	q, _ := mo.open(name)
	for i := range n {
		if _, err := q.Enqueue(context.Background(), fmt.Sprintf("%s-%d", prefix, i), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// Strict priorities: while messages flow a consumer never takes a lower
// level's message while a higher level has one waiting, however deep the
// lower backlog.
func TestStrictPriorityWhileFlowing(t *testing.T) {
	ctx := context.Background()
	c, mo, clk := routedClient(t, ClientOptions{Queues: 2})
	fill(t, mo, "wrk-p4", "low", 200)
	fill(t, mo, "wrk-p4-1", "low", 200)
	fill(t, mo, "wrk-p1-1", "crit", 0)
	fill(t, mo, "wrk-p2", "high", 0)
	if added, err := c.DrainOthers(ctx); err != nil || len(added) != 4 {
		t.Fatalf("DrainOthers = %v, %v; want the 4 queues of levels 1, 2 and 4", added, err)
	}
	q := c.work
	take := func() []Message {
		t.Helper()
		clk.Advance(recheckEmpty)
		msgs, err := q.Dequeue(ctx, 8, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	// Idle turns find the cold level within a bounded number of calls.
	found := false
	for i := 0; i < coldTurn*12 && !found; i++ {
		found = len(take()) > 0
	}
	if !found {
		t.Fatalf("the low level's backlog was not found within %d idle calls", coldTurn*12)
	}
	for range 5 {
		for _, m := range take() {
			if !strings.HasPrefix(m.Text, "low") {
				t.Fatalf("took %q while only low work waits", m.Text)
			}
		}
	}
	fill(t, mo, "wrk-p1-1", "crit", 20)
	fill(t, mo, "wrk", "norm", 20)
	var order []string
	for range 30 {
		for _, m := range take() {
			order = append(order, m.Text[:4])
		}
	}
	// A level's queue that answered empty is asked again at most every
	// recheckEmpty (one queue of the level at a time, so busy polling of
	// empty levels stays bounded): messages that arrive there are found
	// within that many calls (each advances the clock recheckEmpty), two
	// here, one per queue of the level. Until then lower levels go on.
	seen, lowBefore := map[string]int{}, map[string]int{}
	for _, lvl := range order {
		seen[lvl]++
		for _, hi := range []string{"crit", "norm"} {
			if lvl == "low-" && seen[hi] < 20 {
				lowBefore[hi]++
			}
		}
		if lvl == "norm" && seen["crit"] < 20 {
			lowBefore["crit"]++
		}
	}
	for _, hi := range []string{"crit", "norm"} {
		if lowBefore[hi] > 2*8 {
			t.Errorf("%d lower-level messages were taken before the last %s one, want at most 2 calls' worth (16): %v", lowBefore[hi], hi, order)
		}
	}
	if seen["crit"] != 20 || seen["norm"] != 20 {
		t.Fatalf("took %v, want all 20 critical and 20 default-level ones", seen)
	}
}

// Idle polling costs one request per call whatever the number of queues
// and levels; the warm queues are asked at least three calls in four.
func TestIdlePollingIsFlat(t *testing.T) {
	ctx := context.Background()
	c, mo, clk := routedClient(t, ClientOptions{Queues: 1, Consume: []string{"default", "gpu", "mail"}})
	for _, q := range []string{"wrk", "wrk-gpu", "wrk-mail"} {
		for _, p := range []string{"-p1", "-p2", "-p4"} {
			fill(t, mo, q+p, "none", 0)
		}
	}
	if _, err := c.DrainOthers(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.work.(*Queues).Len(); got != 12 {
		t.Fatalf("drains %d queues, want 3 named queues x 4 levels", got)
	}
	const calls = 400
	for range calls {
		clk.Advance(time.Second)
		if _, err := c.work.Dequeue(ctx, 32, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if got := mo.dequeues(); got != calls {
		t.Fatalf("%d idle calls made %d dequeue requests, want one each", calls, got)
	}
	warm := 0
	for _, name := range []string{"wrk", "wrk-gpu", "wrk-mail"} {
		warm += mo.qs[name].opCounts()["dequeue"]
	}
	if warm < calls*(coldTurn-1)/coldTurn {
		t.Fatalf("the warm queues got %d of %d idle calls, want at least %d", warm, calls, calls*(coldTurn-1)/coldTurn)
	}
	for name, q := range mo.qs {
		if name != c.poisonName && q.opCounts()["dequeue"] == 0 {
			t.Errorf("queue %s was never asked in %d idle calls", name, calls)
		}
	}
}

// Weighted priorities: with every level backed up, each level is taken
// in proportion to its weight.
func TestWeightedPriorityShares(t *testing.T) {
	ctx := context.Background()
	c, mo, clk := routedClient(t, ClientOptions{PriorityWeights: []int{8, 4, 2, 1}})
	rng := rand.New(rand.NewPCG(1, 2))
	c.work.(*Queues).randUnit = rng.Float64
	for p, name := range []string{"wrk-p1", "wrk-p2", "wrk", "wrk-p4"} {
		fill(t, mo, name, fmt.Sprintf("l%d", p+1), 3000)
	}
	if _, err := c.DrainOthers(ctx); err != nil {
		t.Fatal(err)
	}
	c.work.(*Queues).Sweep()
	got := map[string]int{}
	const n = 1500
	for range n {
		clk.Advance(recheckEmpty)
		msgs, err := c.work.Dequeue(ctx, 1, time.Hour)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("dequeue = %d, %v", len(msgs), err)
		}
		got[msgs[0].Text[:2]]++
	}
	for i, w := range []int{8, 4, 2, 1} {
		want := float64(n) * float64(w) / 15
		lvl := fmt.Sprintf("l%d", i+1)
		if d := float64(got[lvl]) - want; d > want*0.1 || d < -want*0.1 {
			t.Errorf("level %d took %d of %d, want %.0f ± 10%% (weights 8:4:2:1)", i+1, got[lvl], n, want)
		}
	}
}

// A type's fair key from its payload (types.<type>.fair_key): a message
// that names no key of its own goes to the lane of the payload field's
// value; its own key wins; a payload in a blob, not JSON or without the
// field has none.
func TestFairKeyFromPayload(t *testing.T) {
	ctx := context.Background()
	c, mo, _ := routedClient(t, ClientOptions{FairLanes: 8, FairKeyFields: map[string]string{"bill": "customer"}})
	for _, tc := range []struct {
		env  Envelope
		want string
	}{
		{Envelope{Type: "bill", Payload: `{"customer":"acme","n":1}`}, "acme"},
		{Envelope{Type: "bill", Payload: `{"customer":42}`}, "42"},
		{Envelope{Type: "bill", Payload: `{"customer":"acme"}`, FairKey: "own"}, "own"},
		{Envelope{Type: "bill", Payload: `{"other":"x"}`}, ""},
		{Envelope{Type: "bill", Payload: `not json`}, ""},
		{Envelope{Type: "bill", PayloadBlob: "b/1"}, ""},
		{Envelope{Type: "mail", Payload: `{"customer":"acme"}`}, ""},
	} {
		if got := c.FairKey(tc.env); got != tc.want {
			t.Errorf("FairKey(%+v) = %q, want %q", tc.env, got, tc.want)
		}
		if got, want := c.Route(tc.env).Lane, c.lanes.of(tc.want); got != want {
			t.Errorf("Route(%+v).Lane = %d, want %d (the lane of %q)", tc.env, got, want, tc.want)
		}
	}
	acme := RouteBase("wrk", Route{Lane: c.lanes.of("acme")}.Norm())
	if err := c.Enqueue(ctx, Envelope{ID: "t1", Type: "bill", Payload: `{"customer":"acme"}`}, 0); err != nil {
		t.Fatal(err)
	}
	if n := mo.count(acme); n != 1 {
		t.Errorf("queue %s holds %d messages, want the one whose payload names customer acme", acme, n)
	}
	if err := (ClientOptions{FairKeyFields: map[string]string{"bill": ""}}).WithDefaults().validate(); err == nil || !strings.Contains(err.Error(), `FairKeyFields["bill"]`) {
		t.Errorf("an empty field name: err = %v, want one naming FairKeyFields[\"bill\"]", err)
	}
}

// A lane that ran dry is asked again in its turn while another floods:
// tenant-b's lane answered empty, then got tasks again; they are taken
// within a recheck interval or two, not after tenant-a's flood has
// drained (the empty lane used to be asked only once every lane with
// messages had answered empty).
func TestEmptiedLaneIsFoundAgainWhileAnotherFloods(t *testing.T) {
	ctx := context.Background()
	c, _, clk := routedClient(t, ClientOptions{FairLanes: 8})
	a, b := "tenant-a", "tenant-b"
	for i := 0; c.lanes.of(a) == c.lanes.of(b); i++ {
		b = fmt.Sprintf("tenant-b%d", i)
	}
	send := func(key string, n int) {
		t.Helper()
		for i := range n {
			if err := c.Enqueue(ctx, Envelope{ID: fmt.Sprintf("%s-%d-%d", key, clk.Now().UnixNano(), i), Type: "t", FairKey: key}, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(a, 1000)
	send(b, 1)
	if _, err := c.DrainOthers(ctx); err != nil {
		t.Fatal(err)
	}
	step := 50 * time.Millisecond
	take := func() (gotB int) {
		t.Helper()
		clk.Advance(step)
		msgs, err := c.work.Dequeue(ctx, 2, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if env, _ := DecodeEnvelope(m.Text); env.FairKey == b {
				gotB++
			}
		}
		return gotB
	}
	// B's one task taken, and its lane asked again and found empty.
	for i, got := 0, 0; got < 1; i++ {
		if i == 50 {
			t.Fatalf("tenant-b's first task not taken in 50 dequeues")
		}
		got += take()
	}
	for range 20 {
		take()
	}
	send(b, 5)
	calls, got := 0, 0
	for got < 5 {
		if calls++; calls > 40 {
			t.Fatalf("%d of tenant-b's 5 new tasks taken in 40 dequeues (%v) while tenant-a's lane floods; want all within a few recheck intervals", got, time.Duration(calls)*step)
		}
		got += take()
	}
	t.Logf("tenant-b's lane, found empty, had its 5 new tasks taken within %d dequeues (%v)", calls, time.Duration(calls)*step)
}

// A wake does not say which queue its message went to: the Dequeue after
// Sweep asks every queue until one has messages, even those that answered
// empty a moment ago, so a task sent for now to one of many lanes is found
// at once.
func TestSweepAsksEveryQueue(t *testing.T) {
	ctx := context.Background()
	c, _, clk := routedClient(t, ClientOptions{FairLanes: 64})
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", i)
		if err := c.Enqueue(ctx, Envelope{ID: "first-" + keys[i], Type: "t", FairKey: keys[i]}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DrainOthers(ctx); err != nil {
		t.Fatal(err)
	}
	qs := c.work.(*Queues)
	for got, calls := 0, 0; got < len(keys); calls++ { // drain them all
		if calls > 500 {
			t.Fatalf("%d of %d first messages taken in 500 dequeues", got, len(keys))
		}
		clk.Advance(recheckEmpty)
		msgs, err := qs.Dequeue(ctx, 32, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
	for range 3 { // every lane asked and found empty just now
		qs.Sweep()
		if msgs, _ := qs.Dequeue(ctx, 32, time.Hour); len(msgs) != 0 {
			t.Fatalf("%d messages left", len(msgs))
		}
	}
	if err := c.Enqueue(ctx, Envelope{ID: "now", Type: "t", FairKey: keys[len(keys)-1]}, 0); err != nil {
		t.Fatal(err)
	}
	qs.Sweep()
	msgs, err := qs.Dequeue(ctx, 32, time.Hour)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("the Dequeue after Sweep got %d messages (%v); want the one sent for now to one of %d lanes", len(msgs), err, qs.Len())
	}
}

// Fairness lanes: a key's flood does not hold back another key's few
// tasks — while both lanes have messages a consumer takes from them in
// turn — and weighted keys get shares in proportion to their weights.
func TestFairLanes(t *testing.T) {
	ctx := context.Background()
	c, _, clk := routedClient(t, ClientOptions{FairLanes: 8, FairWeights: map[string]int{"gold": 3}})
	send := func(key string, n int) {
		t.Helper()
		for i := range n {
			if err := c.Enqueue(ctx, Envelope{ID: fmt.Sprintf("%s-%d", key, i), Type: "t", FairKey: key}, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c.lanes.of("gold") != 1 || c.lanes.of("") != 0 {
		t.Fatalf("lanes: gold %d, none %d; want 1 (its own) and 0", c.lanes.of("gold"), c.lanes.of(""))
	}
	a, b := "tenant-a", "tenant-b"
	for i := 0; c.lanes.of(a) == c.lanes.of(b); i++ {
		b = fmt.Sprintf("tenant-b%d", i) // two keys in two lanes
	}
	send(a, 500)
	send(b, 10)
	if _, err := c.DrainOthers(ctx); err != nil {
		t.Fatal(err)
	}
	take := func(n int) []string {
		t.Helper()
		clk.Advance(recheckEmpty)
		msgs, err := c.work.Dequeue(ctx, n, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, m := range msgs {
			env, _ := DecodeEnvelope(m.Text)
			keys = append(keys, env.FairKey)
		}
		return keys
	}
	var first []string
	for len(first) == 0 { // idle turns until the lanes are found
		first = take(4)
	}
	gotB := 0
	for i := range 30 {
		for _, k := range first {
			if k == b {
				gotB++
			}
		}
		if gotB == 10 {
			t.Logf("all 10 of %s taken within %d dequeues behind 500 of %s", b, i+1, a)
			break
		}
		first = take(4)
	}
	if gotB != 10 {
		t.Fatalf("%d of %s's 10 taken in 30 dequeues of 4 behind %s's 500; want all (lanes take turns)", gotB, b, a)
	}
	// Weighted: gold (3) against tenant-a (1), both backed up.
	send("gold", 1000)
	if _, err := c.DrainOthers(ctx); err != nil {
		t.Fatal(err)
	}
	c.work.(*Queues).randUnit = rand.New(rand.NewPCG(3, 4)).Float64
	got := map[string]int{}
	for range 400 {
		for _, k := range take(1) {
			got[k]++
		}
	}
	ratio := float64(got["gold"]) / float64(got[a])
	if ratio < 2.7 || ratio > 3.3 {
		t.Fatalf("taken %v: gold:%s = %.2f, want 3 ± 10%%", got, a, ratio)
	}
}

// Weighted priorities with a level that has nothing: it takes no share
// from the levels that have messages (weights 3,1,1,1 with levels 1 and 4
// backed up and the default level empty: 3:1).
func TestWeightedSharesSkipEmptyLevels(t *testing.T) {
	ctx := context.Background()
	c, mo, clk := routedClient(t, ClientOptions{PriorityWeights: []int{3, 1, 1, 1}})
	c.work.(*Queues).randUnit = rand.New(rand.NewPCG(5, 6)).Float64
	fill(t, mo, "wrk-p1", "hi", 3000)
	fill(t, mo, "wrk-p4", "lo", 3000)
	if _, err := c.DrainOthers(ctx); err != nil {
		t.Fatal(err)
	}
	c.work.(*Queues).Sweep()
	got := map[string]int{}
	for range 1200 {
		clk.Advance(time.Millisecond)
		msgs, err := c.work.Dequeue(ctx, 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			got[m.Text[:2]]++
		}
	}
	lo := float64(got["lo"]) / float64(got["lo"]+got["hi"])
	if lo < 0.225 || lo > 0.275 {
		t.Fatalf("took %v: low share %.3f, want 0.25 ± 10%% (the empty default level takes no share)", got, lo)
	}
}
