package schedule

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

type sent struct {
	env   queue.Envelope
	delay time.Duration
}

// fakeQueue is an Enqueuer and SetAsider that records what it is given.
type fakeQueue struct {
	mu     sync.Mutex
	sent   []sent
	aside  []string // reasons
	raw    []string
	hook   func(env queue.Envelope) error // called before recording; an error fails the enqueue
	setErr error
	// taken is how many of the messages sent a consumer has taken off
	// the queue (fakeDepth leaves them out).
	taken int
}

func (q *fakeQueue) Enqueue(ctx context.Context, env queue.Envelope, delay time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if q.hook != nil {
		if err := q.hook(env); err != nil {
			return err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sent = append(q.sent, sent{env, delay})
	return nil
}

func (q *fakeQueue) SetAside(ctx context.Context, raw, reason string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.setErr != nil {
		return q.setErr
	}
	q.aside = append(q.aside, reason)
	q.raw = append(q.raw, raw)
	return nil
}

func (q *fakeQueue) ids() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, s := range q.sent {
		out = append(out, s.env.ID)
	}
	return out
}

func (q *fakeQueue) byID(id string) (sent, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range q.sent {
		if s.env.ID == id {
			return s, true
		}
	}
	return sent{}, false
}

type moverEnv struct {
	c  *Client
	mt *table.Memory
	fc *clock.Fake
	q  *fakeQueue
	m  *Mover
}

func newMoverEnv(t *testing.T, gen int64, o MoverOptions) *moverEnv {
	t.Helper()
	c, mt, fc := newMemClient(t, Options{})
	q := &fakeQueue{}
	o.Generation = func() int64 { return gen }
	o.Clock = fc
	o.Logger = cmp.Or(o.Logger, quiet)
	if o.Enqueuer == nil {
		o.Enqueuer = q
	}
	if o.SetAside == nil {
		o.SetAside = q
	}
	m, err := newMover(mt, o)
	if err != nil {
		t.Fatal(err)
	}
	return &moverEnv{c: c, mt: mt, fc: fc, q: q, m: m}
}

// onePass takes the fence (once) and runs one pass.
func (e *moverEnv) onePass(t *testing.T) error {
	t.Helper()
	gen := e.m.o.Generation()
	e.m.mu.Lock()
	_, have := e.m.fence["00"]
	e.m.mu.Unlock()
	if !have {
		if err := e.m.takeFence(ctx(t), "00", gen); err != nil {
			return err
		}
	}
	_, err := e.m.pass(ctx(t), gen)
	return err
}

func (e *moverEnv) add(t *testing.T, it Item) Item {
	t.Helper()
	it, err := e.c.Add(ctx(t), it, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return it
}

func itemKeys(mt *table.Memory) []string {
	var out []string
	for _, e := range mt.Rows("00") {
		if e.RowKey[0] >= '0' && e.RowKey[0] <= '9' {
			out = append(out, e.RowKey)
		}
	}
	return out
}

func TestMoverMovesDueRowsEarlyAndInOrder(t *testing.T) {
	e := newMoverEnv(t, 7, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second}})
	e.add(t, Item{ID: "late", Due: t0.Add(-time.Minute), Payload: "p1", MaxAttempts: 4})
	e.add(t, Item{ID: "now", Due: t0, Type: "mail"})
	e.add(t, Item{ID: "soon", Due: t0.Add(3 * time.Second)})
	e.add(t, Item{ID: "later", Due: t0.Add(6 * time.Second)})
	var moved []string
	e.m.o.OnMoved = func(_ context.Context, envs []queue.Envelope) {
		for _, env := range envs {
			moved = append(moved, env.ID)
		}
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if strings.Join(moved, ",") != "late,now,soon" {
		t.Fatalf("OnMoved order %v", moved)
	}
	late, _ := e.q.byID("late")
	if late.delay != 0 || late.env.Payload != "p1" || late.env.Type != DefaultType || late.env.MaxAttempts != 4 ||
		late.env.Generation != 7 || !late.env.Due.Equal(t0.Add(-time.Minute)) || !late.env.Enqueued.Equal(t0) || late.env.V != queue.EnvelopeVersion || late.env.Series != "" {
		t.Fatalf("late envelope %+v", late)
	}
	soon, _ := e.q.byID("soon")
	if soon.delay != 3*time.Second {
		t.Fatalf("early enqueue delay %s, want 3s", soon.delay)
	}
	if now, _ := e.q.byID("now"); now.env.Type != "mail" || now.delay != 0 {
		t.Fatalf("now envelope %+v", now)
	}
	// What is left: the later row, its index row and the fence.
	if keys := keysOf(e.mt.Rows("00")); len(keys) != 3 || !strings.HasSuffix(keys[0], "_later") || keys[1] != "id~later" || keys[2] != FenceRowKey {
		t.Fatalf("rows left %v", keys)
	}
	st := e.m.Stats()
	if st.Moved != 3 || st.Enqueued != 3 || st.Batches != 1 || st.LastMoveLag != time.Minute || st.Generation != 0 && st.Generation != 7 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMoverEarlyDisabled(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{Early: -1}})
	e.add(t, Item{ID: "soon", Due: t0.Add(100 * time.Millisecond)})
	e.add(t, Item{ID: "exact", Due: t0})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if ids := e.q.ids(); len(ids) != 1 || ids[0] != "exact" {
		t.Fatalf("sent %v", ids)
	}
}

func TestMoverRecurringReplacedByNext(t *testing.T) {
	e := newMoverEnv(t, 2, MoverOptions{})
	e.add(t, Item{ID: "tick", Due: t0.Add(-95 * time.Minute), Recurrence: "@every 10m", Payload: "x"})
	e.add(t, Item{ID: "cron", Due: t0, Recurrence: "0 9 * * *", TZ: "Europe/Berlin"})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	tick, ok := e.q.byID("tick@" + t0.Add(-95*time.Minute).Format(time.RFC3339Nano))
	if !ok || tick.env.Series != "tick" || tick.env.Recurrence != "@every 10m" {
		t.Fatalf("sent %v", e.q.ids())
	}
	if n := len(e.q.ids()); n != 2 {
		t.Fatalf("missed occurrences must run once: %v", e.q.ids())
	}
	got, err := e.c.Get(ctx(t), "tick")
	if err != nil || !got.Due.Equal(t0.Add(5*time.Minute)) || got.Payload != "x" || !got.Indexed {
		t.Fatalf("next occurrence %+v, %v", got, err)
	}
	cron, _ := e.c.Get(ctx(t), "cron")
	if !cron.Due.Equal(utc("2025-06-02T07:00:00Z")) || cron.TZ != "Europe/Berlin" {
		t.Fatalf("cron next %+v", cron)
	}
	if n := len(itemKeys(e.mt)); n != 2 {
		t.Fatalf("item rows %v", itemKeys(e.mt))
	}
	// Cancel stops the series.
	if _, err := e.c.Cancel(ctx(t), "tick"); err != nil {
		t.Fatal(err)
	}
	e.fc.Advance(time.Hour)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	for _, id := range e.q.ids() {
		if strings.HasPrefix(id, "tick@") && id != tick.env.ID {
			t.Fatalf("cancelled series still ran: %v", e.q.ids())
		}
	}
}

func TestMoverSetsMalformedRowsAside(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	good, _ := RowKey(t0.Add(-time.Second), "good")
	rows := map[string]map[string]any{
		"!bang":                                  {"Message": "x"},
		"0123_short":                             {"Message": "x"},
		good:                                     {"Message": "ok"},
		mustKey(t0.Add(-9*time.Second), "nomsg"): {"Type": "x"},
		mustKey(t0.Add(-8*time.Second), "badtype"): {"Message": "x", "Type": "two words"},
		mustKey(t0.Add(-7*time.Second), "badrec"):  {"Message": "x", "Recurrence": "@every never"},
		mustKey(t0.Add(-6*time.Second), "badtz"):   {"Message": "x", "Recurrence": "@daily", "TZ": "Moon/Base"},
		mustKey(t0.Add(-5*time.Second), "badatt"):  {"Message": "x", "Attempts": "many"},
		mustKey(t0.Add(-4*time.Second), "msgnum"):  {"Message": 42},
		mustKey(t0.Add(-3*time.Second), "maxatt"):  {"Message": "x", "MaxAttempts": -3},
	}
	for rk, p := range rows {
		if err := e.mt.PutRaw("00", rk, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if ids := e.q.ids(); len(ids) != 1 || ids[0] != "good" {
		t.Fatalf("sent %v", ids)
	}
	if len(e.q.aside) != 9 {
		t.Fatalf("set aside %d: %v", len(e.q.aside), e.q.aside)
	}
	all := strings.Join(e.q.aside, "\n")
	for _, want := range []string{"!bang", "0123_short", "no Message", `"two words"`, `"@every never"`, `"Moon/Base"`, "Attempts is many", "Message is", "MaxAttempts is -3"} {
		t.Run(want, func(t *testing.T) {
			if !strings.Contains(all, want) {
				t.Errorf("reasons do not mention %q:\n%s", want, all)
			}
		})
	}
	if !strings.Contains(strings.Join(e.q.raw, ""), `"Type":"two words"`) {
		t.Errorf("raw entity JSON not passed: %v", e.q.raw)
	}
	if keys := itemKeys(e.mt); len(keys) != 0 {
		t.Fatalf("rows left %v", keys)
	}
	if st := e.m.Stats(); st.SetAside != 9 || st.Moved != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A row whose task id is outside ValidateID's set (from its RowKey or its
// Id property) is malformed: set aside, never sent. "nightly@…" would pass
// for the run id of an occurrence of the series "nightly".
func TestMoverSetsAsideRowsWithBadIDs(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	rows := map[string]map[string]any{
		mustKey(t0, "a b"):                             {"Message": "x"},
		mustKey(t0, "o'brien"):                         {"Message": "x"},
		mustKey(t0, "nightly@2025-06-01T12:00:00Z"):    {"Message": "x"},
		mustKey(t0, "fine"):                            {"Message": "x", "Id": "has space"},
		mustKey(t0.Add(-time.Second), "good"):          {"Message": "ok"},
		mustKey(t0.Add(-time.Second), "good-too:v1.2"): {"Message": "ok"},
	}
	for rk, p := range rows {
		if err := e.mt.PutRaw("00", rk, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	ids := e.q.ids()
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"good", "good-too:v1.2"}) {
		t.Fatalf("sent %v", ids)
	}
	all := strings.Join(e.q.aside, "\n")
	if len(e.q.aside) != 4 {
		t.Fatalf("set aside %d:\n%s", len(e.q.aside), all)
	}
	for _, want := range []string{`"a b"`, `"o'brien"`, `"nightly@2025-06-01T12:00:00Z"`, `"has space"`, "letters, digits"} {
		if !strings.Contains(all, want) {
			t.Errorf("reasons do not mention %s:\n%s", want, all)
		}
	}
	if keys := itemKeys(e.mt); len(keys) != 0 {
		t.Fatalf("rows left %v", keys)
	}
	if st := e.m.Stats(); st.SetAside != 4 || st.Moved != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func mustKey(t time.Time, id string) string {
	k, err := RowKey(t, id)
	if err != nil {
		panic(err)
	}
	return k
}

func TestMoverKeepsRowsItCannotSetAside(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	_ = e.mt.PutRaw("00", "!bad", map[string]any{"Message": "x"})
	e.q.setErr = errors.New("poison queue down")
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if e.mt.Len("00") != 2 { // the bad row and the fence
		t.Fatalf("a row that could not be set aside was deleted: %v", keysOf(e.mt.Rows("00")))
	}
}

func TestMoverSweepFindsKeysThatNeverComeDue(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	far := "3000000000000000000_far" // year ~9507: valid, not due
	for _, rk := range []string{"abc", "Zed", "5000000000000000000_x", "~zz", "~fence2", far} {
		t.Run(rk, func(t *testing.T) {
			_ = e.mt.PutRaw("00", rk, map[string]any{"Message": "x"})
		})
	}
	e.add(t, Item{ID: "future", Due: t0.Add(time.Hour)}) // index row must survive
	if err := e.m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	if err := e.m.sweep(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if len(e.q.aside) != 5 {
		t.Fatalf("set aside %v", e.q.aside)
	}
	keys := strings.Join(keysOf(e.mt.Rows("00")), " ")
	if keys != mustKey(t0.Add(time.Hour), "future")+" "+far+" id~future "+FenceRowKey {
		t.Fatalf("rows left: %s", keys)
	}
}

// Malformed keys starting with '0' but not with a digit after it (ticks
// forgotten) sort after every due bound and before "1": the sweep reaches
// them.
func TestMoverSweepFindsMalformedKeysStartingWithZero(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	for _, rk := range []string{"0abc", "0_invoice-42"} {
		if err := e.mt.PutRaw("00", rk, map[string]any{"Message": "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if err := e.m.sweep(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(e.q.aside, "\n")
	if len(e.q.aside) != 2 || !strings.Contains(all, "0abc") || !strings.Contains(all, "0_invoice-42") {
		t.Fatalf("set aside %d:\n%s", len(e.q.aside), all)
	}
	if ids := e.q.ids(); len(ids) != 0 {
		t.Fatalf("sent %v", ids)
	}
	if keys := strings.Join(keysOf(e.mt.Rows("00")), " "); keys != FenceRowKey {
		t.Fatalf("rows left: %s", keys)
	}
}

func TestMoverEnqueueFailureKeepsRowForNextPoll(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	e.add(t, Item{ID: "a", Due: t0})
	e.add(t, Item{ID: "b", Due: t0})
	fail := true
	e.q.hook = func(env queue.Envelope) error {
		if env.ID == "a" && fail {
			return errors.New("queue unavailable")
		}
		return nil
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if keys := itemKeys(e.mt); len(keys) != 1 || !strings.HasSuffix(keys[0], "_a") {
		t.Fatalf("rows %v", keys)
	}
	fail = false
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if len(itemKeys(e.mt)) != 0 || len(e.q.ids()) != 2 {
		t.Fatalf("rows %v sent %v", itemKeys(e.mt), e.q.ids())
	}
	if st := e.m.Stats(); st.Errors != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMoverQueueRefusalSetsAside(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	e.add(t, Item{ID: "a", Due: t0})
	e.q.hook = func(queue.Envelope) error { return fmt.Errorf("too big: %w", storage.ErrBadRequest) }
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if len(e.q.aside) != 1 || !strings.Contains(e.q.aside[0], "queue refused") || e.mt.Len("00") != 1 {
		t.Fatalf("aside %v rows %v", e.q.aside, keysOf(e.mt.Rows("00")))
	}
}

func TestMoverRowChangedMeanwhileIsNotDeleted(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	for _, id := range []string{"a", "b", "c"} {
		e.add(t, Item{ID: id, Due: t0})
	}
	e.q.hook = func(env queue.Envelope) error {
		if env.ID == "b" { // a user reschedules b while it is being moved
			if _, err := e.c.Reschedule(context.Background(), "b", t0.Add(time.Hour)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	got, err := e.c.Get(ctx(t), "b")
	if err != nil || !got.Due.Equal(t0.Add(time.Hour)) {
		t.Fatalf("rescheduled row lost: %+v %v", got, err)
	}
	if keys := itemKeys(e.mt); len(keys) != 1 {
		t.Fatalf("rows %v", keys)
	}
	if st := e.m.Stats(); st.Skipped != 1 || st.Moved != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMoverWorksAroundMissingIndexAndExistingNext(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	e.add(t, Item{ID: "noidx", Due: t0})
	_, _ = e.mt.Submit(ctx(t), []table.Op{{Kind: table.Delete, PartitionKey: "00", RowKey: "id~noidx"}})
	rec := e.add(t, Item{ID: "rec", Due: t0, Recurrence: "@every 1m"})
	nextRK := mustKey(t0.Add(time.Minute), "rec")
	_ = e.mt.PutRaw("00", nextRK, map[string]any{"Message": "already", "Recurrence": "@every 1m"})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	keys := itemKeys(e.mt)
	if len(keys) != 1 || keys[0] != nextRK {
		t.Fatalf("rows %v", keys)
	}
	if got, _ := e.c.Get(ctx(t), "rec"); got.RowKey != nextRK {
		t.Fatalf("index not moved to next occurrence: %+v (was %s)", got, rec.RowKey)
	}
	if len(e.q.ids()) != 2 {
		t.Fatalf("sent %v", e.q.ids())
	}
	// A recurring series whose index row is gone continues unindexed.
	e.add(t, Item{ID: "lost", Due: t0, Recurrence: "@every 1h"})
	_, _ = e.mt.Submit(ctx(t), []table.Op{{Kind: table.Delete, PartitionKey: "00", RowKey: "id~lost"}})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	got, err := e.c.Get(ctx(t), "lost")
	if err != nil || got.Indexed || !got.Due.Equal(t0.Add(time.Hour)) {
		t.Fatalf("lost-index series: %+v %v", got, err)
	}
}

func TestMoverBatchesOf100WithFence(t *testing.T) {
	e := newMoverEnv(t, 3, MoverOptions{})
	for i := range 250 {
		rk := mustKey(t0.Add(-time.Duration(250-i)*time.Second), fmt.Sprintf("r%03d", i))
		_ = e.mt.PutRaw("00", rk, map[string]any{"Message": ""})
	}
	var sizes []int
	e.mt.BeforeSubmit(func(ops []table.Op) error {
		last := ops[len(ops)-1]
		if len(ops) > 1 && (last.RowKey != FenceRowKey || last.IfMatch == "" || last.Kind != table.Merge) {
			return fmt.Errorf("batch without a conditional fence update: %+v", last)
		}
		sizes = append(sizes, len(ops))
		return nil
	})
	var order []string
	e.m.o.OnMoved = func(_ context.Context, envs []queue.Envelope) {
		for _, env := range envs {
			order = append(order, env.ID)
		}
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sizes) != "[1 100 100 53]" { // fence take-over, then 99+1, 99+1, 52+1
		t.Fatalf("transaction sizes %v", sizes)
	}
	for i := range order {
		if order[i] != fmt.Sprintf("r%03d", i) {
			t.Fatalf("moved out of order at %d: %s", i, order[i])
		}
	}
	if len(order) != 250 || len(itemKeys(e.mt)) != 0 {
		t.Fatalf("moved %d, left %d", len(order), len(itemKeys(e.mt)))
	}
}

func TestMoverFullPassContinues(t *testing.T) {
	e := newMoverEnv(t, 3, MoverOptions{MoverSettings: MoverSettings{MaxPerPass: 10}})
	for i := range 25 {
		_ = e.mt.PutRaw("00", mustKey(t0.Add(-time.Hour+time.Duration(i)*time.Second), fmt.Sprintf("r%02d", i)), map[string]any{"Message": ""})
	}
	if err := e.m.takeFence(ctx(t), "00", 3); err != nil {
		t.Fatal(err)
	}
	full, err := e.m.pass(ctx(t), 3)
	if err != nil || !full || len(e.q.ids()) != 10 {
		t.Fatalf("full=%v err=%v sent=%d", full, err, len(e.q.ids()))
	}
	// Run drains the rest without waiting for the poll timer.
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- e.m.Run(c) }()
	if err := e.fc.WaitForTimers(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(e.q.ids()) != 25 || len(itemKeys(e.mt)) != 0 {
		t.Fatalf("sent %d, left %v", len(e.q.ids()), itemKeys(e.mt))
	}
}

func TestMoverLargeDirectPayload(t *testing.T) {
	store := payload.NewMemory()
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{InlineLimit: 100}, PayloadStore: store})
	big := strings.Repeat("<", 50) // 300 bytes as JSON (\u003c)
	_ = e.mt.PutRaw("00", mustKey(t0, "big"), map[string]any{"Message": big})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	s, ok := e.q.byID("big")
	if !ok || s.env.Payload != "" || s.env.PayloadBlob == "" {
		t.Fatalf("envelope %+v", s)
	}
	if b, err := store.Get(ctx(t), s.env.PayloadBlob); err != nil || string(b) != big {
		t.Fatalf("blob %q %v", b, err)
	}
	// Without a store the row is set aside rather than retried forever.
	e2 := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{InlineLimit: 100}})
	_ = e2.mt.PutRaw("00", mustKey(t0, "big"), map[string]any{"Message": big})
	if err := e2.onePass(t); err != nil {
		t.Fatal(err)
	}
	if len(e2.q.aside) != 1 || !strings.Contains(e2.q.aside[0], "no payload store") {
		t.Fatalf("aside %v", e2.q.aside)
	}
}

// runMover starts Run in the background; wait returns its result.
func runMover(t *testing.T, m *Mover) (cancel context.CancelFunc, wait func(time.Duration) (error, bool)) {
	t.Helper()
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- m.Run(c) }()
	var once sync.Once
	var res error
	var finished bool
	wait = func(d time.Duration) (error, bool) {
		once.Do(func() {
			select {
			case res = <-done:
				finished = true
			case <-time.After(d):
			}
		})
		return res, finished
	}
	t.Cleanup(func() {
		cancel()
		if _, ok := wait(10 * time.Second); !ok {
			t.Error("Run did not return after cancel")
		}
	})
	return cancel, wait
}

func TestMoverFencedAtStart(t *testing.T) {
	e := newMoverEnv(t, 3, MoverOptions{})
	e.add(t, Item{ID: "a", Due: t0})
	_ = e.mt.PutRaw("00", FenceRowKey, map[string]any{PropGeneration: int64(5)})
	err := e.m.Run(ctx(t))
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "generation 5, ours is 3") {
		t.Fatalf("Run = %v", err)
	}
	if len(e.q.ids()) != 0 || len(itemKeys(e.mt)) != 1 || e.m.Stats().Fenced != 1 {
		t.Fatalf("a fenced mover moved: %v", e.q.ids())
	}
}

func TestMoverFencedMidTerm(t *testing.T) {
	e := newMoverEnv(t, 3, MoverOptions{MoverSettings: MoverSettings{PollEvery: time.Second}})
	_, wait := runMover(t, e.m)
	if err := e.fc.WaitForTimers(ctx(t), 1); err != nil { // took control, first pass done
		t.Fatal(err)
	}
	f, _ := e.mt.Get(ctx(t), "00", FenceRowKey)
	if g, _, _ := f.Props.StrictInt(PropGeneration); g != 3 {
		t.Fatalf("fence generation %d", g)
	}
	// A newer leader takes over; our next batch must fail whole.
	newer := newMoverEnvSharing(t, e, 4)
	if err := newer.takeFence(ctx(t), "00", 4); err != nil {
		t.Fatal(err)
	}
	e.add(t, Item{ID: "a", Due: t0})
	e.add(t, Item{ID: "b", Due: t0})
	e.fc.Advance(time.Second)
	if err, ok := wait(10 * time.Second); !ok || !errors.Is(err, ErrFenced) {
		t.Fatalf("Run = %v (returned: %v)", err, ok)
	}
	if keys := itemKeys(e.mt); len(keys) != 2 {
		t.Fatalf("a stale leader's deletes happened: %v", keys)
	}
	// It did enqueue before failing: a duplicate, never a loss.
	if len(e.q.ids()) != 2 {
		t.Fatalf("sent %v", e.q.ids())
	}
}

func newMoverEnvSharing(t *testing.T, e *moverEnv, gen int64) *Mover {
	m, err := newMover(e.mt, MoverOptions{Generation: func() int64 { return gen }, Enqueuer: e.q, SetAside: e.q, Clock: e.fc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// cancelTable cancels a context on a chosen call and counts calls after it.
type cancelTable struct {
	table.Table
	mu        sync.Mutex
	cancelled bool
	after     int
}

func (c *cancelTable) note() {
	c.mu.Lock()
	if c.cancelled {
		c.after++
	}
	c.mu.Unlock()
}
func (c *cancelTable) Query(ctx context.Context, q table.Query) (table.Page, error) {
	c.note()
	return c.Table.Query(ctx, q)
}
func (c *cancelTable) Get(ctx context.Context, pk, rk string) (table.Entity, error) {
	c.note()
	return c.Table.Get(ctx, pk, rk)
}
func (c *cancelTable) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	c.note()
	return c.Table.Submit(ctx, ops)
}

func TestMoverStopsAtOnceOnCancel(t *testing.T) {
	c, mt, fc := newMemClient(t, Options{})
	for i := range 50 {
		if _, err := c.Add(ctx(t), Item{ID: fmt.Sprintf("t%02d", i), Due: t0}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ct := &cancelTable{Table: mt}
	runCtx, cancel := context.WithCancel(ctx(t))
	var enq sync.Mutex
	n := 0
	q := &fakeQueue{}
	q.hook = func(queue.Envelope) error {
		enq.Lock()
		defer enq.Unlock()
		n++
		if n == 5 {
			ct.mu.Lock()
			ct.cancelled = true
			ct.mu.Unlock()
			cancel() // the lease is lost in the middle of a pass
		}
		return nil
	}
	m, err := newMover(ct, MoverOptions{MoverSettings: MoverSettings{Concurrency: 1}, Generation: func() int64 { return 1 }, Enqueuer: q, SetAside: q, Clock: fc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Run(runCtx); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if ct.after != 0 {
		t.Fatalf("%d storage calls after the context ended", ct.after)
	}
	if got := len(itemKeys(mt)); got != 50 {
		t.Fatalf("rows deleted after cancel: %d left", got)
	}
	if len(q.ids()) > 5 {
		t.Fatalf("kept enqueueing after cancel: %d", len(q.ids()))
	}
}

func TestMoverBackpressure(t *testing.T) {
	var mu sync.Mutex
	depth := 10
	e := newMoverEnv(t, 1, MoverOptions{
		MoverSettings: MoverSettings{PollEvery: time.Second, MaxDepth: 10, ResumeBelow: 5},
		Depth:         func(context.Context) (int, error) { mu.Lock(); defer mu.Unlock(); return depth, nil },
	})
	e.add(t, Item{ID: "a", Due: t0})
	setDepth := func(d int) { mu.Lock(); depth = d; mu.Unlock() }
	runMover(t, e.m)
	step := func() {
		t.Helper()
		if err := e.fc.WaitForTimers(ctx(t), 1); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if len(e.q.ids()) != 0 || !e.m.Stats().HoldingBack {
		t.Fatalf("moved at depth 10: %v %+v", e.q.ids(), e.m.Stats())
	}
	setDepth(6) // below MaxDepth but not below ResumeBelow: still holding
	e.fc.Advance(time.Second)
	step()
	if len(e.q.ids()) != 0 || !e.m.Stats().HoldingBack {
		t.Fatalf("resumed at depth 6: %v", e.q.ids())
	}
	setDepth(4)
	e.fc.Advance(time.Second)
	step()
	if len(e.q.ids()) != 1 || e.m.Stats().HoldingBack {
		t.Fatalf("did not resume at depth 4: %v %+v", e.q.ids(), e.m.Stats())
	}
	e.add(t, Item{ID: "b", Due: t0.Add(time.Second)})
	setDepth(12) // deep again: hold
	e.fc.Advance(time.Second)
	step()
	if len(e.q.ids()) != 1 || !e.m.Stats().HoldingBack {
		t.Fatalf("ignored depth 12: %v", e.q.ids())
	}
}

// A pass must not push the queue past MaxDepth however many rows are due:
// it moves at most MaxDepth − depth rows, then holds back until the depth
// falls below ResumeBelow.
func TestMoverBackpressureCapsAPass(t *testing.T) {
	var mu sync.Mutex
	var q *fakeQueue
	consumed := 0
	depth := func(context.Context) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(q.ids()) - consumed, nil
	}
	var logs bytes.Buffer
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: time.Second, MaxDepth: 20, ResumeBelow: 10}, Depth: depth,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	q = e.q
	for i := range 200 {
		_ = e.mt.PutRaw("00", mustKey(t0.Add(-time.Hour+time.Duration(i)*time.Second), fmt.Sprintf("r%03d", i)), map[string]any{"Message": ""})
	}
	consume := func(n int) { mu.Lock(); consumed += n; mu.Unlock() }
	maxDepth := 0
	for pass := 0; len(itemKeys(e.mt)) > 0; pass++ {
		if pass > 100 {
			t.Fatalf("not drained after 100 passes: %d rows left", len(itemKeys(e.mt)))
		}
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
		d, _ := depth(ctx(t))
		maxDepth = max(maxDepth, d)
		if d > 20 {
			t.Fatalf("pass %d left the queue %d deep (MaxDepth 20)", pass, d)
		}
		if d == 20 && !e.m.Stats().HoldingBack {
			t.Fatalf("pass %d filled the queue but is not holding back", pass)
		}
		consume(min(d, 7)) // a slow consumer
	}
	if got := len(e.q.ids()); got != 200 || maxDepth != 20 {
		t.Fatalf("sent %d (want 200), max depth %d (want 20)", got, maxDepth)
	}
	// Each line of holding back and resuming names the mover's term and
	// shards: a sharded worker's shard movers hold back one by one, and
	// the simulator's checker tells them apart by it.
	lines := 0
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "msg=\"holding back;") || strings.Contains(l, "msg=resuming") {
			lines++
			if want := fmt.Sprintf("shards=[00] generation=%d", e.m.o.Generation()); !strings.Contains(l, want) {
				t.Errorf("log line %q does not name the mover (%s)", l, want)
			}
		}
	}
	if lines < 2 {
		t.Errorf("%d lines of holding back or resuming, want both:\n%s", lines, logs.String())
	}
}

// With the depth unknown, a pass moves at most one batch.
func TestMoverBackpressureUnknownDepthMovesOneBatch(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{
		MoverSettings: MoverSettings{PollEvery: time.Second, MaxDepth: 20},
		Depth:         func(context.Context) (int, error) { return 0, errors.New("queue unreachable") }})
	for i := range 250 {
		_ = e.mt.PutRaw("00", mustKey(t0.Add(-time.Hour+time.Duration(i)*time.Second), fmt.Sprintf("r%03d", i)), map[string]any{"Message": ""})
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if got := len(e.q.ids()); got != table.MaxOps {
		t.Fatalf("sent %d with the depth unknown, want one batch (%d)", got, table.MaxOps)
	}
	if e.m.Stats().HoldingBack {
		t.Fatal("an unknown depth started holding back")
	}
}

func TestMoverLostCommitResponse(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	e.add(t, Item{ID: "a", Due: t0})
	e.add(t, Item{ID: "b", Due: t0.Add(time.Millisecond)})
	// The first batch commits but its response is lost.
	lose := true
	e.mt.BeforeSubmit(func(ops []table.Op) error {
		return nil
	})
	wrapped := &lossyTable{Memory: e.mt, lose: &lose}
	m, _ := newMover(wrapped, MoverOptions{Generation: func() int64 { return 1 }, Enqueuer: e.q, SetAside: e.q, Clock: e.fc, Logger: quiet})
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	// Now a second pass must not think it is fenced.
	e.add(t, Item{ID: "c", Due: t0})
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if keys := itemKeys(e.mt); len(keys) != 0 {
		t.Fatalf("rows left %v", keys)
	}
}

type lossyTable struct {
	*table.Memory
	lose *bool
}

func (l *lossyTable) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	etags, err := l.Memory.Submit(ctx, ops)
	if err == nil && len(ops) > 1 && *l.lose {
		*l.lose = false
		return nil, errors.New("connection reset (the transaction did commit)")
	}
	return etags, err
}

func TestMoverOptionsValidation(t *testing.T) {
	q := &fakeQueue{}
	gen := func() int64 { return 1 }
	for _, c := range []struct {
		o    MoverOptions
		want string
	}{
		{MoverOptions{Enqueuer: q, SetAside: q}, "Generation is nil"},
		{MoverOptions{Generation: gen, SetAside: q}, "Enqueuer is nil"},
		{MoverOptions{Generation: gen, Enqueuer: q}, "SetAside is nil"},
		{MoverOptions{MoverSettings: MoverSettings{PollEvery: time.Millisecond}, Generation: gen, Enqueuer: q, SetAside: q}, "PollEvery = 1ms"},
		{MoverOptions{MoverSettings: MoverSettings{Concurrency: -1}, Generation: gen, Enqueuer: q, SetAside: q}, "Concurrency = -1"},
		{MoverOptions{MoverSettings: MoverSettings{MaxDepth: 10}, Generation: gen, Enqueuer: q, SetAside: q}, "Depth is nil"},
		{MoverOptions{MoverSettings: MoverSettings{MaxDepth: 10, ResumeBelow: 11}, Generation: gen, Enqueuer: q, SetAside: q, Depth: func(context.Context) (int, error) { return 0, nil }}, "ResumeBelow = 11"},
		{MoverOptions{MoverSettings: MoverSettings{Early: 48 * time.Hour}, Generation: gen, Enqueuer: q, SetAside: q}, "Early = 48h0m0s"},
		{MoverOptions{MoverSettings: MoverSettings{InlineLimit: 1 << 20}, Generation: gen, Enqueuer: q, SetAside: q}, "InlineLimit = 1048576"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if _, err := newMover(table.NewMemory("", nil), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("NewMover = %v, want %q", err, c.want)
			}
		})
	}
	m, _ := newMover(table.NewMemory("", nil), MoverOptions{Generation: func() int64 { return 0 }, Enqueuer: q, SetAside: q})
	if err := m.Run(ctx(t)); err == nil || !strings.Contains(err.Error(), "generation 0") {
		t.Fatalf("Run with generation 0 = %v", err)
	}
}

// TestMoverRetriesABusyQueueSoon: a row whose message the queue refused
// as busy is tried again a second later (or after the Retry-After the
// service sends), not a whole poll later.
func TestMoverRetriesABusyQueueSoon(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second}})
	e.add(t, Item{ID: "a", Due: t0})
	var mu sync.Mutex
	refusals := 1
	e.q.hook = func(env queue.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if refusals > 0 {
			refusals--
			return fmt.Errorf("enqueue: %w", storage.ErrServerBusy)
		}
		return nil
	}
	runMover(t, e.m)
	if err := e.fc.WaitForTimers(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if len(e.q.ids()) != 0 {
		t.Fatalf("sent %v before the retry", e.q.ids())
	}
	e.fc.Advance(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for len(e.q.ids()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the refused row was not tried again a second later")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queryCounter signals each Query on queried.
type queryCounter struct {
	table.Table
	queried chan struct{}
}

func (q *queryCounter) Query(ctx context.Context, tq table.Query) (table.Page, error) {
	q.queried <- struct{}{}
	return q.Table.Query(ctx, tq)
}

// The next page of due rows is read while the current one is sent: with
// one send at a time, the first send waits for the second page's query,
// which only a read-ahead makes before the sends of the first page end.
// (Otherwise the sends in flight drain during every page's round trip.)
func TestMoverReadsTheNextPageWhileSending(t *testing.T) {
	c, mt, fc := newMemClient(t, Options{})
	const rows = 130 // pages of 60: a batch's sends start within the first
	for i := range rows {
		if _, err := c.Add(ctx(t), Item{ID: fmt.Sprintf("t%03d", i), Due: t0.Add(-time.Minute)}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mt.SetMaxPage(60)
	qc := &queryCounter{Table: mt, queried: make(chan struct{}, 100)}
	q := &fakeQueue{}
	var once sync.Once
	q.hook = func(queue.Envelope) error {
		var err error
		once.Do(func() {
			deadline := time.After(10 * time.Second)
			for n := 0; n < 2 && err == nil; {
				select {
				case <-qc.queried:
					n++
				case <-deadline:
					err = errors.New("the second page was not read while the first was sent")
				}
			}
		})
		return err
	}
	m, err := newMover(qc, MoverOptions{Generation: func() int64 { return 1 }, Clock: fc, Logger: quiet, Enqueuer: q, SetAside: q,
		MoverSettings: MoverSettings{Concurrency: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if got := len(q.ids()); got != rows {
		t.Fatalf("sent %d of %d in one pass", got, rows)
	}
}

// An occurrence that falls due while a pass of the term fails to settle
// its series' row (the queue refusing its sends) is sent by the pass that
// settles it, not skipped as missed: only occurrences due while nobody
// moved, or before the term's first pass, run once for many. The skip
// counted from the previous completed pass, which had read the row and
// failed, so an occurrence the term had seen due was dropped, and its
// early-sent message, which the row never recorded, was acknowledged as
// stale (issue 38, sweep seed 29729: an @every 20s occurrence never ran
// after a table fault window).
func TestOccurrenceOfARowAPassFailedToSettleIsNotSkipped(t *testing.T) {
	var failing atomic.Bool
	e := newMoverEnv(t, 2, MoverOptions{MoverSettings: MoverSettings{Early: time.Second}})
	e.q.hook = func(queue.Envelope) error {
		if failing.Load() {
			return errors.New("queue busy")
		}
		return nil
	}
	e.add(t, Item{ID: "s", Due: t0.Add(20 * time.Second), Recurrence: "@every 20s"})
	failing.Store(true)
	e.fc.Advance(20500 * time.Millisecond)
	for _, step := range []time.Duration{0, 20 * time.Second} {
		e.fc.Advance(step)
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
	}
	failing.Store(false)
	e.fc.Advance(time.Second)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, at := range []time.Duration{20 * time.Second, 40 * time.Second} {
		want = append(want, "s@"+t0.Add(at).Format(time.RFC3339Nano))
	}
	if got := e.q.ids(); !slices.Equal(got, want) {
		t.Errorf("sent %v, want %v: the occurrences the term saw due while its passes failed", got, want)
	}
	if got, err := e.c.Get(ctx(t), "s"); err != nil || !got.Due.Equal(t0.Add(time.Minute)) {
		t.Errorf("the series after: %+v, %v; want its next occurrence at 1m", got, err)
	}
}

// A due task whose run's record could not be written (a fault that
// passes: BeforeSendHold says hold) is not sent, however due: moved, it
// would have neither its row nor a record until a worker claimed it, and
// a traffic cop watching it as a parent took it for cancelled — a child
// --after-any it started before it ran, a child --after it was cancelled
// (issue 38, sweep seeds 68455, 68031). Its row stays for the next pass,
// which sends it once the record is written.
func TestDueRunWhoseRecordFailedStaysForTheNextPass(t *testing.T) {
	var fail atomic.Bool
	e := newMoverEnv(t, 2, MoverOptions{BeforeSendHold: func(_ context.Context, envs []queue.Envelope) ([]bool, []bool) {
		marked, hold := make([]bool, len(envs)), make([]bool, len(envs))
		for i := range envs {
			marked[i], hold[i] = !fail.Load(), fail.Load()
		}
		return marked, hold
	}})
	e.add(t, Item{ID: "now", Due: t0})
	fail.Store(true)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if ids := e.q.ids(); len(ids) != 0 {
		t.Fatalf("sent %v without its run's record", ids)
	}
	if _, err := e.c.Get(ctx(t), "now"); err != nil {
		t.Fatalf("the row of a run whose record failed: %v; want it pending", err)
	}
	e.m.mu.Lock()
	held, soon := e.m.held, e.m.retrySoon
	e.m.mu.Unlock()
	if held != 1 || soon <= 0 {
		// (A full pass that held rows waits for retrySoon instead of
		// going again at once against the storage that failed them.)
		t.Fatalf("the pass held %d rows, retry in %v; want 1, and a retry soon", held, soon)
	}
	fail.Store(false)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if ids := e.q.ids(); !slices.Equal(ids, []string{"now"}) {
		t.Fatalf("sent %v; want it sent once its record is written", ids)
	}
	if _, err := e.c.Get(ctx(t), "now"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the row after its send: %v; want it moved", err)
	}
}

// A task moved further ahead of its due time than the next pass (a slow
// pass widens the retire window) whose run could not be recorded queued
// stays pending for the next pass instead: moved unrecorded, neither its
// row nor a run record was there, so `status` and `cancel` answered "not
// found" for 14 s before it ran (issue 38, sweep seed 30689). Nearer its
// due time, and due now, it is sent recorded or not, as before.
func TestUnrecordedRunIsNotMovedAheadOfItsDueTime(t *testing.T) {
	var refuse atomic.Bool
	var marked []string
	e := newMoverEnv(t, 2, MoverOptions{MoverSettings: MoverSettings{Early: 30 * time.Second}, BeforeSend: func(_ context.Context, envs []queue.Envelope) []bool {
		out := make([]bool, len(envs))
		for i, env := range envs {
			out[i] = !refuse.Load()
			if out[i] {
				marked = append(marked, env.ID)
			}
		}
		return out
	}})
	slowPass := func() {
		t.Helper()
		e.m.mu.Lock()
		e.m.lastTook = 4 * time.Second // the last pass was slow: the retire window is 13 s
		e.m.mu.Unlock()
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
	}
	e.add(t, Item{ID: "soon", Due: t0.Add(12 * time.Second)})
	refuse.Store(true)
	slowPass()
	if ids := e.q.ids(); len(ids) != 0 {
		t.Fatalf("sent %v ahead of its due time without its run recorded", ids)
	}
	if _, err := e.c.Get(ctx(t), "soon"); err != nil {
		t.Fatalf("the row of an unrecorded run: %v; want it pending", err)
	}
	refuse.Store(false)
	slowPass()
	if ids := e.q.ids(); !slices.Equal(ids, []string{"soon"}) || !slices.Equal(marked, []string{"soon"}) {
		t.Fatalf("sent %v, recorded %v; want it sent once recorded", ids, marked)
	}
	// Due before the next pass, or now, it goes whether or not its run is
	// recorded.
	e.add(t, Item{ID: "before", Due: t0.Add(8 * time.Second)})
	e.add(t, Item{ID: "now", Due: t0})
	refuse.Store(true)
	slowPass()
	if ids := e.q.ids(); !slices.Contains(ids, "now") || !slices.Contains(ids, "before") {
		t.Fatalf("sent %v; want the tasks due now and before the next pass sent unrecorded", ids)
	}
}

// A pass held back by backpressure says so in its report, apart from
// Busy: a sharded owner's gate lets a shard with nothing due go quiet on
// it rather than poll it for as long as the queue is deep (a review of
// the quiet shards' sweep).
func TestAHeldBackPassReportsIt(t *testing.T) {
	reports := make(chan PassReport, 1)
	e := newMoverEnv(t, 1, MoverOptions{
		MoverSettings: MoverSettings{PollEvery: time.Second, MaxDepth: 10, ResumeBelow: 5},
		Depth:         func(context.Context) (int, error) { return 10, nil },
		Pace: func(ctx context.Context, r PassReport) error {
			select {
			case reports <- r:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		},
	})
	runMover(t, e.m)
	select {
	case r := <-reports:
		if !r.Busy || !r.HeldBack || r.Rows != 0 {
			t.Fatalf("report of a held-back pass: %+v; want Busy and HeldBack, no rows", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pass reported")
	}
}

// A cancel or a replace deletes a task's payload blob with its row, but
// not when a message may still name it (blobNamedOut): a series' (every
// occurrence's message names the series' blob, one under way carries on
// to its end, retries included, and the row's Seq, written after the
// send, does not reliably say whether one went: row 199 and the review of
// its first fix), or a row due by now, which a traffic-cop pass may be
// sending. Its retries would fail for want of their payload.
func TestACancelOrReplaceKeepsABlobAMessageMayName(t *testing.T) {
	big := strings.Repeat("x", 200)
	series := Item{ID: "tick", Due: t0.Add(time.Minute), Recurrence: "@every 10m", Payload: big}
	later := Item{ID: "tick", Due: t0.Add(time.Hour), Payload: big}
	cancel := func(e *moverEnv) error {
		_, err := e.c.Cancel(ctx(t), "tick")
		return err
	}
	replace := func(due time.Time) func(e *moverEnv) error {
		return func(e *moverEnv) error {
			_, err := e.c.Add(ctx(t), Item{ID: "tick", Due: due, Recurrence: "@every 10m", Payload: "small"}, AddOptions{Replace: true})
			return err
		}
	}
	for _, tc := range []struct {
		name   string
		it     Item
		before func(t *testing.T, e *moverEnv) // what happens to the row before the change
		change func(e *moverEnv) error
		kept   bool
	}{
		{name: "a series never sent, cancelled", it: series, change: cancel, kept: true},
		{name: "a series sent, cancelled", it: series, before: sendFirst, change: cancel, kept: true},
		{name: "a series sent, replaced at another due time", it: series, before: sendFirst, change: replace(t0.Add(time.Hour)), kept: true},
		{name: "a series sent, replaced at its next due time", it: series, before: sendFirst, change: replace(t0.Add(11 * time.Minute)), kept: true},
		{name: "a series whose first send's move was refused, rescheduled, cancelled", it: series, before: func(t *testing.T, e *moverEnv) {
			e.fc.Advance(time.Minute)
			var armed atomic.Bool
			armed.Store(true)
			e.mt.BeforeSubmit(func(ops []table.Op) error {
				if !slices.ContainsFunc(ops, func(o table.Op) bool { return o.Kind == table.Delete && strings.HasSuffix(o.RowKey, "tick") }) ||
					!armed.CompareAndSwap(true, false) {
					return nil // (the fence, or the reschedule's own)
				}
				if _, err := e.c.Reschedule(ctx(t), "tick", t0.Add(time.Hour)); err != nil {
					t.Errorf("reschedule: %v", err)
				}
				return nil // the move then meets the rescheduled row
			})
			_ = e.onePass(t)
			if _, ok := e.q.byID("tick@" + t0.Add(time.Minute).Format(time.RFC3339Nano)); !ok {
				t.Fatalf("the first occurrence was not sent: %v", e.q.ids())
			}
		}, change: cancel, kept: true},
		{name: "a one-off due later, cancelled", it: later, change: cancel},
		{name: "a one-off due later, replaced", it: later, change: replace(t0.Add(2 * time.Hour))},
		{name: "a one-off due by now, cancelled", it: later, before: func(_ *testing.T, e *moverEnv) { e.fc.Advance(time.Hour) }, change: cancel, kept: true},
		{name: "a one-off due by now, replaced", it: later, before: func(_ *testing.T, e *moverEnv) { e.fc.Advance(time.Hour) }, change: replace(t0.Add(2 * time.Hour)), kept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMoverEnv(t, 2, MoverOptions{})
			store := payload.NewMemory()
			e.c.opts.PayloadStore, e.c.opts.InlineLimit = store, 64
			e.add(t, tc.it)
			if tc.before != nil {
				tc.before(t, e)
			}
			if err := tc.change(e); err != nil {
				t.Fatal(err)
			}
			if n := store.Names(); tc.kept != (len(n) == 1) {
				t.Fatalf("blobs after the change: %v; want it kept %v", n, tc.kept)
			}
		})
	}
}

// sendFirst lets the mover send the first occurrence of the series
// "tick", due t0+1m, and move its row on.
func sendFirst(t *testing.T, e *moverEnv) {
	t.Helper()
	e.fc.Advance(time.Minute)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	occ, ok := e.q.byID("tick@" + t0.Add(time.Minute).Format(time.RFC3339Nano))
	if !ok || occ.env.PayloadBlob == "" {
		t.Fatalf("the occurrence due was not sent naming the blob: %v", e.q.ids())
	}
}

// A pass sends a one-off row without marking it (retiring it after the
// send) only when it is due within maxRetire, however slow the last pass
// was: a cancel, replace or roll-back that deletes an unmarked row keeps
// its payload blob only when it is due within ClockSlack. A row due later
// within Early is sent with a token and marked (a review of row 199: a
// replace raced a pass that had sent a row due 70 s on without a mark, and
// deleted the blob its message named).
func TestAPassRetiresOnlyRowsDueWithinMaxRetire(t *testing.T) {
	e := newMoverEnv(t, 2, MoverOptions{MoverSettings: MoverSettings{Early: 5 * time.Minute}})
	e.add(t, Item{ID: "soon", Due: t0.Add(maxRetire - time.Second)})
	e.add(t, Item{ID: "later", Due: t0.Add(maxRetire + 40*time.Second)})
	e.m.mu.Lock()
	e.m.lastTook = 45 * time.Second // without the bound, the window is PollEvery + 90 s
	e.m.mu.Unlock()
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	for id, marked := range map[string]bool{"soon": false, "later": true} {
		s, ok := e.q.byID(id)
		if !ok {
			t.Fatalf("%s not sent: %v", id, e.q.ids())
		}
		it, err := e.c.Get(ctx(t), id)
		switch {
		case !marked && (s.env.Token != "" || !errors.Is(err, ErrNotFound)):
			t.Errorf("%s: token %q, row %+v, %v; want sent without a token and retired", id, s.env.Token, it, err)
		case marked && (s.env.Token == "" || err != nil || !messageMayBeOut(it)):
			t.Errorf("%s: token %q, row %+v, %v; want sent with a token and its row marked", id, s.env.Token, it, err)
		}
	}
}

// A reschedule that races a pass which has sent a one-off row without a
// token and not yet retired it leaves two versions that may each run once
// (README); the first to succeed deletes its payload blob. The moved row
// gets a copy of its own, so that the other version does not fail for want
// of its payload (a review of issue 38's row 199). A row not due yet, whose
// message no pass can have sent, keeps its one blob.
func TestARescheduleRacingTheMoveCopiesThePayload(t *testing.T) {
	for _, racing := range []bool{true, false} {
		t.Run(fmt.Sprintf("racing %v", racing), func(t *testing.T) {
			e := newMoverEnv(t, 2, MoverOptions{})
			store := payload.NewMemory()
			e.c.opts.PayloadStore, e.c.opts.InlineLimit = store, 64
			due := t0.Add(time.Hour)
			if racing {
				due = t0
			}
			e.add(t, Item{ID: "x", Due: due, Payload: strings.Repeat("x", 200)})
			if racing {
				var armed atomic.Bool
				armed.Store(true)
				e.mt.BeforeSubmit(func(ops []table.Op) error {
					if !slices.ContainsFunc(ops, func(o table.Op) bool { return o.Kind == table.Delete && strings.HasSuffix(o.RowKey, "_x") }) ||
						!armed.CompareAndSwap(true, false) {
						return nil
					}
					if _, err := e.c.Reschedule(ctx(t), "x", t0.Add(time.Hour)); err != nil {
						t.Errorf("reschedule: %v", err)
					}
					return nil // the retire then meets the moved row
				})
				_ = e.onePass(t)
				if _, ok := e.q.byID("x"); !ok {
					t.Fatalf("x was not sent: %v", e.q.ids())
				}
			} else if _, err := e.c.Reschedule(ctx(t), "x", t0.Add(2*time.Hour)); err != nil {
				t.Fatal(err)
			}
			it, err := e.c.Get(ctx(t), "x")
			if err != nil {
				t.Fatal(err)
			}
			names := store.Names()
			if !racing {
				if len(names) != 1 || !strings.HasSuffix(it.PayloadBlob, names[0]) {
					t.Fatalf("blobs %v, the row names %s; want its one blob", names, it.PayloadBlob)
				}
				return
			}
			sent, _ := e.q.byID("x")
			if len(names) != 2 || sent.env.PayloadBlob == it.PayloadBlob {
				t.Fatalf("blobs %v; the message names %s, the moved row %s; want a blob each", names, sent.env.PayloadBlob, it.PayloadBlob)
			}
			if b, err := store.Get(ctx(t), it.PayloadBlob); err != nil || len(b) < 200 {
				t.Fatalf("the moved row's payload: %d bytes, %v", len(b), err)
			}
		})
	}
}

// loseMove commits the first move of task x's row (an insert and a
// delete) and answers it as a conflict, as the SDK's retry of a lost
// answer does; then the moved row is gone (a pass sent and retired it).
type loseMove struct {
	*table.Memory
	lost bool
}

func (l *loseMove) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if l.lost || len(ops) < 2 || ops[0].Kind != table.Insert || !strings.HasSuffix(ops[0].RowKey, "_x") || ops[1].Kind != table.Delete {
		return l.Memory.Submit(ctx, ops)
	}
	if _, err := l.Memory.Submit(ctx, ops); err != nil {
		return nil, err
	}
	l.lost = true
	l.Memory.Remove(ops[0].PartitionKey, ops[0].RowKey)
	l.Memory.Remove(ops[0].PartitionKey, indexKey("x"))
	return nil, fmt.Errorf("%w: the retry of a lost answer", storage.ErrPreconditionFailed)
}

// A reschedule whose move committed with its answer lost, and whose moved
// row was then sent and retired, keeps the copy of the payload blob it
// made: the sent message names it (a review of the copy's first form,
// which deleted it when the retry found the row gone).
func TestARescheduleWhoseMoveLostItsAnswerKeepsItsCopy(t *testing.T) {
	mt := table.NewMemory("", nil)
	store := payload.NewMemory()
	c, err := newClient(&loseMove{Memory: mt}, Options{Clock: clock.NewFake(t0), Logger: quiet, PayloadStore: store, InlineLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctx(t), Item{ID: "x", Due: t0, Payload: strings.Repeat("x", 200)}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reschedule(ctx(t), "x", t0.Add(time.Hour)); err == nil {
		t.Fatal("the reschedule answered success; want the retry to find the row gone")
	}
	if names := store.Names(); len(names) != 2 {
		t.Fatalf("blobs %v; want the original and the moved row's copy kept", names)
	}
}
