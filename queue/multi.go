package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

// MaxQueues is the most work queues a Client spreads messages over.
const MaxQueues = 64

// QueueNames returns the names of n work queues named after base: base,
// then base-1, base-2, …
func QueueNames(base string, n int) []string {
	out := make([]string, max(n, 1))
	out[0] = base
	for i := 1; i < len(out); i++ {
		out[i] = base + "-" + strconv.Itoa(i)
	}
	return out
}

// Queues is one MessageQueue over several queues: the throughput queues
// of a route, so that the messages of a fleet are not bound by one
// queue's throughput (Azure: about 2,000 messages/s per queue), and on the
// consumer's side every route it drains — named queues and their priority
// levels. Enqueue spreads messages over the queues given to NewQueues in
// turn.
//
// Dequeue is where priorities and idle cost meet. While messages flow (a
// call got some in the last flowFor, or Sweep was called) it asks the
// queues in priority order, highest level first (in weighted mode the
// first level is drawn by weight), and returns the first answer with
// messages: a higher level known to have a message waiting is always
// asked before a lower one is. (Queues that answered empty are asked again
// after 250 ms, at most recheckPerLevel per level at a time, so busy
// polling of empty queues stays bounded; see flowPlan.) An idle call asks
// one queue, so an idle consumer's polling costs the same whatever the number of
// queues: in turn the warm ones (a route's default level, and any queue
// that had messages in the last ten minutes), and every fourth call one of
// the cold ones, the longest unasked first. Update and Delete go to the
// queue a message came from; Count sums every queue.
type Queues struct {
	sendTo []MessageQueue // the queues Enqueue uses (never changes)
	next   atomic.Uint64  // Enqueue's turn
	mu     sync.Mutex
	// ms are every queue drained: sendTo, then any added (Drain). It only
	// grows by append, so a copy of the slice taken under mu stays valid.
	ms     []*member
	cursor int  // the turn
	found  bool // the last Dequeue got messages (or Sweep was called)
	// flowUntil: until then Dequeue asks as while messages flow, though
	// the last call got none (flowFor after the last that got some).
	flowUntil time.Time
	sweep     bool // the next Dequeue asks every queue (Sweep)
	idleRun   int  // idle calls since the last that asked a cold queue
	weights   []int
	recheck   [Levels + 1]time.Time // when a level's recheck window began
	// rechecked counts a level's empty queues asked again in its window.
	rechecked [Levels + 1]int
	clk       clock.Clock
	randUnit  func() float64
}

// member is one queue drained and what Dequeue knows of it.
type member struct {
	q      MessageQueue
	level  int  // its priority, 1 (highest) to 4
	weight int  // its fairness lane's weight (1 unless configured)
	home   bool // always warm: a route's default level
	asked  time.Time
	empty  bool      // its last answer was empty
	found  time.Time // when it last had messages
}

const (
	// warmFor is how long a queue that had messages stays warm.
	warmFor = 10 * time.Minute
	// coldTurn: every coldTurn-th idle call asks a cold queue.
	coldTurn = 4
	// recheckEmpty is how soon one of a level's queues that answered
	// empty is asked again while messages flow.
	recheckEmpty = 250 * time.Millisecond
	// recheckPerLevel is how many of a level's empty queues are asked
	// again at most every recheckEmpty: each of up to that many
	// throughput queues of one route in time, more lanes in turn.
	recheckPerLevel = 4
	// searchEmpty is how many queues that answered empty a Dequeue asks
	// again, at most, when none known to have messages has any.
	searchEmpty = 8
	// flowFor is how long after its last messages a Queues asks as while
	// they flow: a burst that ends is often followed by another in queues
	// that ran dry, which idle polling (one queue per call, backing off)
	// would find one by one.
	flowFor = 2 * time.Second
)

// NewQueues returns a MessageQueue over qs (at least one, at most
// MaxQueues), all drained as the default priority level.
func NewQueues(qs ...MessageQueue) (*Queues, error) {
	if len(qs) == 0 || len(qs) > MaxQueues {
		return nil, fmt.Errorf("%w: %d work queues: want 1 to %d", ErrInvalidOptions, len(qs), MaxQueues)
	}
	qs = qs[:len(qs):len(qs)]
	m := &Queues{sendTo: qs, clk: clock.Real{}, randUnit: defaultRand}
	for _, q := range qs {
		m.ms = append(m.ms, &member{q: q, level: PriorityDefault, weight: 1, home: true})
	}
	return m, nil
}

// Weighted makes Dequeue, while messages flow, draw which level it asks
// first with the given weights of levels 1 to 4 (each at least 1) instead
// of always the highest: over many calls with every level backed up, level
// i is asked first weights[i-1]/sum(weights) of the time, so low levels
// keep a share. It must be called before the first Dequeue.
func (m *Queues) Weighted(weights []int) error {
	if len(weights) != Levels {
		return fmt.Errorf("%w: %d priority weights: want %d, of levels 1 to %d", ErrInvalidOptions, len(weights), Levels, Levels)
	}
	for i, w := range weights {
		if w < 1 || w > 1000 {
			return fmt.Errorf("%w: weight of priority %d = %d: want 1 to 1000", ErrInvalidOptions, i+1, w)
		}
	}
	m.mu.Lock()
	m.weights = slices.Clone(weights)
	m.mu.Unlock()
	return nil
}

// setClock sets the clock Dequeue judges warmth and rechecks by.
func (m *Queues) setClock(c clock.Clock) {
	m.mu.Lock()
	m.clk = clock.OrReal(c)
	m.mu.Unlock()
}

// Sweep makes the next Dequeue ask every queue in priority order until
// one has messages (those known to have some first): a consumer woken for
// a message calls it, since a wake does not say which queue the message
// went to.
func (m *Queues) Sweep() {
	m.mu.Lock()
	m.found, m.sweep = true, true
	m.mu.Unlock()
}

// Drain adds q to the queues drained (not to those sent to) at the
// default priority: a queue of the same family found in the account,
// which another client's larger queue count sends to, so that nothing
// sent there is stranded. Adding a queue of a name already drained does
// nothing; it reports whether q was added.
func (m *Queues) Drain(q MessageQueue) bool { return m.DrainLevel(q, PriorityDefault, 1, false) }

// DrainLevel adds q to the queues drained, as a queue of priority level
// (1–4) and a fairness lane of weight (at least 1); home makes it warm for
// good (a route's default level). A name already drained is not added
// again; it reports whether q was added.
func (m *Queues) DrainLevel(q MessageQueue, level, weight int, home bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, have := range m.ms {
		if have.q.Name() == q.Name() {
			return false
		}
	}
	if len(m.ms) >= 4*MaxQueues*Levels {
		return false
	}
	m.ms = append(m.ms, &member{q: q, level: min(max(level, 1), Levels), weight: max(weight, 1), home: home})
	return true
}

// all returns the queues drained now.
func (m *Queues) all() []MessageQueue {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]MessageQueue, len(m.ms))
	for i, x := range m.ms {
		out[i] = x.q
	}
	return out
}

// members returns a copy of what Dequeue knows of each queue.
func (m *Queues) members() []member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]member, len(m.ms))
	for i, x := range m.ms {
		out[i] = *x
	}
	return out
}

// Len returns how many queues are drained.
func (m *Queues) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ms)
}

// Name implements MessageQueue: the first queue's name and how many there
// are.
func (m *Queues) Name() string {
	qs := m.all()
	if len(qs) == 1 {
		return qs[0].Name()
	}
	return fmt.Sprintf("%s (+%d)", qs[0].Name(), len(qs)-1)
}

// Enqueue implements MessageQueue: the queues in turn.
func (m *Queues) Enqueue(ctx context.Context, text string, visibility time.Duration) (Message, error) {
	i := int((m.next.Add(1) - 1) % uint64(len(m.sendTo)))
	msg, err := m.sendTo[i].Enqueue(ctx, text, visibility)
	msg.queue = i
	return msg, err
}

// warm reports whether x is polled at every idle turn.
func (x *member) warm(now time.Time) bool {
	return x.home || (!x.found.IsZero() && now.Sub(x.found) < warmFor)
}

// plan returns the indexes of the queues the next Dequeue asks, in order
// (m.mu held).
func (m *Queues) plan(now time.Time) []int {
	if !m.found && !now.Before(m.flowUntil) {
		return m.idlePlan(now)
	}
	if order := m.flowPlan(now); len(order) > 0 {
		return order
	}
	// Every queue answered empty within recheckEmpty: one, as when idle.
	return m.idlePlan(now)
}

// idlePlan is the plan of an idle Dequeue: one queue, the warm ones in
// turn and a cold one every coldTurn-th call (m.mu held).
func (m *Queues) idlePlan(now time.Time) []int {
	n := len(m.ms)
	cold := -1
	for i, x := range m.ms {
		if !x.warm(now) && (cold < 0 || x.asked.Before(m.ms[cold].asked)) {
			cold = i
		}
	}
	if cold >= 0 && m.idleRun >= coldTurn-1 {
		m.idleRun = 0
		return []int{cold}
	}
	m.idleRun++
	for k := range n {
		i := (m.cursor + k) % n
		if m.ms[i].warm(now) {
			m.cursor = (i + 1) % n
			return []int{i}
		}
	}
	return []int{m.cursor % n}
}

// flowPlan is the plan of a Dequeue while messages flow (m.mu held).
func (m *Queues) flowPlan(now time.Time) []int {
	n := len(m.ms)
	// Level by level. Within a level, first those of the queues that
	// answered empty at least recheckEmpty ago — the longest unasked,
	// at most recheckPerLevel per level every recheckEmpty — then the
	// queues that had messages at their last answer, from the turn (or,
	// with lane weights, one drawn by weight first). The empty ones go
	// first so that they are asked whatever the others hold: a lane or
	// throughput queue that ran dry and got messages again is found
	// within recheckEmpty with up to recheckPerLevel queues a level, and
	// within (its level's empty queues / recheckPerLevel) × recheckEmpty
	// with more; what rechecking costs does not grow with the number of
	// queues (at most 16 requests a second per level).
	first := 0
	if m.weights != nil {
		first = m.drawLevel()
	}
	order := make([]int, 0, n)
	add := func(level int) {
		var full, stale []int
		for k := range n {
			i := (m.cursor + k) % n
			x := m.ms[i]
			switch {
			case x.level != level:
			case !x.empty:
				full = append(full, i)
			case now.Sub(x.asked) >= recheckEmpty:
				stale = append(stale, i)
			}
		}
		if len(full) > 1 {
			if j := m.drawLane(full); j > 0 {
				full[0], full[j] = full[j], full[0]
			}
		}
		if now.Sub(m.recheck[level]) >= recheckEmpty {
			m.recheck[level], m.rechecked[level] = now, 0
		}
		slices.SortFunc(stale, func(i, j int) int { return m.ms[i].asked.Compare(m.ms[j].asked) })
		k := min(len(stale), recheckPerLevel-m.rechecked[level])
		m.rechecked[level] += k
		order = append(order, stale[:k]...)
		order = append(order, full...)
	}
	if first > 0 {
		add(first)
	}
	for level := 1; level <= Levels; level++ {
		if level != first {
			add(level)
		}
	}
	// Last, when none of those has messages: up to searchEmpty more of
	// the queues that answered empty at least recheckEmpty ago, highest
	// level and longest unasked first. They cost requests only when the
	// worker would otherwise have nothing to run, and find messages sent
	// meanwhile to queues that had run dry.
	limit, stale := searchEmpty, recheckEmpty
	if m.sweep {
		limit, stale, m.sweep = n, 0, false
	}
	planned := make([]bool, n)
	for _, i := range order {
		planned[i] = true
	}
	var search []int
	for i, x := range m.ms {
		if x.empty && now.Sub(x.asked) >= stale && !planned[i] {
			search = append(search, i)
		}
	}
	slices.SortFunc(search, func(i, j int) int {
		return cmp.Or(cmp.Compare(m.ms[i].level, m.ms[j].level), m.ms[i].asked.Compare(m.ms[j].asked))
	})
	return append(order, search[:min(len(search), limit)]...)
}

// drawLane returns the index in idx of the queue asked first: drawn by
// the queues' weights when they differ, else 0 (the turn) (m.mu held).
func (m *Queues) drawLane(idx []int) int {
	sum, same := 0, true
	for _, i := range idx {
		sum += m.ms[i].weight
		same = same && m.ms[i].weight == m.ms[idx[0]].weight
	}
	if same {
		return 0
	}
	r := m.randUnit() * float64(sum)
	for j, i := range idx {
		r -= float64(m.ms[i].weight)
		if r < 0 {
			return j
		}
	}
	return 0
}

// drawLevel draws by weight a level that had messages at its last
// answer (else any level present) (m.mu held): a level known to be empty
// takes no share from the others.
func (m *Queues) drawLevel() int {
	var present, full [Levels + 1]bool
	anyFull := false
	for _, x := range m.ms {
		present[x.level] = true
		if !x.empty {
			full[x.level], anyFull = true, true
		}
	}
	if anyFull {
		present = full
	}
	sum := 0
	for l := 1; l <= Levels; l++ {
		if present[l] {
			sum += m.weights[l-1]
		}
	}
	r := m.randUnit() * float64(sum)
	for l := 1; l <= Levels; l++ {
		if !present[l] {
			continue
		}
		r -= float64(m.weights[l-1])
		if r < 0 {
			return l
		}
	}
	return 0
}

// Dequeue implements MessageQueue (see Queues).
func (m *Queues) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]Message, error) {
	m.mu.Lock()
	now := m.clk.Now()
	order := m.plan(now)
	ms := m.ms
	m.mu.Unlock()
	for _, i := range order {
		msgs, err := ms[i].q.Dequeue(ctx, max, visibility)
		for j := range msgs {
			msgs[j].queue = i
		}
		m.mu.Lock()
		x := ms[i]
		x.asked, x.empty = m.clk.Now(), err == nil && len(msgs) == 0
		if len(msgs) > 0 {
			x.found, m.flowUntil = x.asked, x.asked.Add(flowFor)
		}
		if m.found || len(msgs) > 0 {
			m.cursor = (i + 1) % len(ms) // the next call starts at the next queue: lanes take turns
		}
		m.found = err == nil && len(msgs) > 0
		m.mu.Unlock()
		if err != nil || len(msgs) > 0 {
			return msgs, err
		}
	}
	return nil, nil
}

// Peek implements MessageQueue: up to max from the queues in order.
func (m *Queues) Peek(ctx context.Context, max int) ([]Message, error) {
	var out []Message
	for i, q := range m.all() {
		if len(out) >= max {
			break
		}
		msgs, err := q.Peek(ctx, max-len(out))
		if err != nil {
			return out, err
		}
		for j := range msgs {
			msgs[j].queue = i
		}
		out = append(out, msgs...)
	}
	return out, nil
}

func (m *Queues) of(msg Message) (MessageQueue, error) {
	qs := m.all()
	if msg.queue < 0 || msg.queue >= len(qs) {
		return nil, fmt.Errorf("%w: message %s names queue %d of %d", ErrMessageGone, msg.ID, msg.queue, len(qs))
	}
	return qs[msg.queue], nil
}

// Update implements MessageQueue, on the queue msg came from.
func (m *Queues) Update(ctx context.Context, msg Message, text string, visibility time.Duration) (Message, error) {
	q, err := m.of(msg)
	if err != nil {
		return msg, err
	}
	out, err := q.Update(ctx, msg, text, visibility)
	out.queue = msg.queue
	return out, err
}

// Delete implements MessageQueue, on the queue msg came from.
func (m *Queues) Delete(ctx context.Context, msg Message) error {
	q, err := m.of(msg)
	if err != nil {
		return err
	}
	return q.Delete(ctx, msg)
}

// Count implements MessageQueue: the sum over the queues (one request
// each).
func (m *Queues) Count(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for _, q := range m.all() {
		c, err := q.Count(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Name(), err))
			continue
		}
		n += c
	}
	return n, errors.Join(errs...)
}

// Clear implements MessageQueue: every queue.
func (m *Queues) Clear(ctx context.Context) error {
	var errs []error
	for _, q := range m.all() {
		if err := q.Clear(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
