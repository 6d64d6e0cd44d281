package queue

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
)

// Default queue names.
const (
	DefaultQueue       = "leasecron-work"
	DefaultPoisonQueue = "leasecron-work-poison"
)

// MaxMessageSize is the largest message body, in bytes, the service
// accepts.
const MaxMessageSize = 64 << 10

// MaxBatch is the most messages one dequeue returns.
const MaxBatch = 32

// Sentinel errors of the producer side.
var (
	// ErrTooLarge: an encoded envelope exceeds MaxMessageSize; large
	// payloads must travel through a blob (Envelope.PayloadBlob).
	ErrTooLarge = errors.New("message too large")
	// ErrDelayTooLong: an initial visibility delay beyond MaxVisibility.
	ErrDelayTooLong = errors.New("enqueue delay too long")
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Queue is the work queue name. Default DefaultQueue.
	Queue string
	// PoisonQueue is the queue for messages set aside. Default
	// DefaultPoisonQueue.
	PoisonQueue string
	// Queues is how many work queues messages are spread over: Queue,
	// then Queue-1, Queue-2, … (QueueNames; see Queues). Default 1, at
	// most MaxQueues.
	Queues int
	// Routes route a task type's messages to a named queue and priority
	// when the envelope names neither (configuration: types.<type>.queue
	// and .priority); a type not listed goes to the default queue at the
	// default priority.
	Routes map[string]Route
	// Consume are the named queues the client drains (a consumer's, and
	// Peek's and Depth's): each at every priority level. Default the
	// default queue only.
	Consume []string
	// PriorityWeights, when set (four weights, of levels 1 to 4), makes
	// a consumer pick the level it asks first by weight instead of always
	// the highest (see Queues.Weighted).
	PriorityWeights []int
	// FairLanes is how many fairness lanes the messages with a fair key
	// (Envelope.FairKey) of one route are spread over, by a hash of the
	// key (fairness.lanes): each lane is a queue of its own, and while
	// several have messages a consumer takes from them in turn, so one
	// key's flood delays the others' only by its share. Default
	// DefaultFairLanes; at most MaxFairLanes.
	FairLanes int
	// FairWeights gives fair keys a weight (fairness.weights.<key>): each
	// key listed has a lane of its own, taken from in proportion to its
	// weight (1 to 1000) against the others' (1 each). At most
	// FairLanes-1 keys.
	FairWeights map[string]int
	// FairKeyFields names, per task type, the top-level field of a JSON
	// object payload whose value is the fair key of a message that names
	// none (types.<type>.fair_key: payload.<field>). An inline payload
	// only: a payload kept in a blob, or one without the field, has no
	// fair key.
	FairKeyFields map[string]string
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns o with every zero field set to its default.
func (o ClientOptions) WithDefaults() ClientOptions {
	o.Queue = cmp.Or(o.Queue, DefaultQueue)
	o.PoisonQueue = cmp.Or(o.PoisonQueue, DefaultPoisonQueue)
	o.Queues = cmp.Or(o.Queues, 1)
	if len(o.Consume) == 0 {
		o.Consume = []string{DefaultRouteQueue}
	}
	o.FairLanes = cmp.Or(o.FairLanes, DefaultFairLanes)
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o ClientOptions) validate() error {
	if err := storage.ValidateQueueName(o.Queue); err != nil {
		return fmt.Errorf("%w: ClientOptions.Queue: %w", ErrInvalidOptions, err)
	}
	if err := storage.ValidateQueueName(o.PoisonQueue); err != nil {
		return fmt.Errorf("%w: ClientOptions.PoisonQueue: %w", ErrInvalidOptions, err)
	}
	if o.Queue == o.PoisonQueue {
		return fmt.Errorf("%w: ClientOptions.PoisonQueue = %q: want a queue other than Queue", ErrInvalidOptions, o.PoisonQueue)
	}
	if o.Queues < 1 || o.Queues > MaxQueues {
		return fmt.Errorf("%w: ClientOptions.Queues = %d: want 1 to %d work queues", ErrInvalidOptions, o.Queues, MaxQueues)
	}
	if err := ValidateFamily(o.Queue, o.PoisonQueue, o.Queues, "ClientOptions"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	for typ, r := range o.Routes {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("%w: ClientOptions.Routes[%q]: %w", ErrInvalidOptions, typ, err)
		}
		if err := validRouteName(o.Queue, r, o.Queues); err != nil {
			return fmt.Errorf("%w: ClientOptions.Routes[%q]: %w", ErrInvalidOptions, typ, err)
		}
	}
	for _, q := range o.Consume {
		if err := ValidateRouteQueue(q); err != nil {
			return fmt.Errorf("%w: ClientOptions.Consume: %w", ErrInvalidOptions, err)
		}
		for p := 1; p <= Levels; p++ {
			if err := validRouteName(o.Queue, Route{Queue: q, Priority: p}, o.Queues); err != nil {
				return fmt.Errorf("%w: ClientOptions.Consume: %w", ErrInvalidOptions, err)
			}
		}
	}
	if o.PriorityWeights != nil {
		if err := (&Queues{}).Weighted(o.PriorityWeights); err != nil {
			return fmt.Errorf("ClientOptions.PriorityWeights: %w", err)
		}
	}
	for typ, f := range o.FairKeyFields {
		if f == "" {
			return fmt.Errorf("%w: ClientOptions.FairKeyFields[%q] is empty: want the name of a top-level payload field", ErrInvalidOptions, typ)
		}
	}
	return validateLanes(o.FairLanes, o.FairWeights)
}

// validRouteName checks that the work queues of route r in the family of
// base are valid queue names.
func validRouteName(base string, r Route, n int) error {
	for _, name := range QueueNames(RouteBase(base, r), n) {
		if err := storage.ValidateQueueName(name); err != nil {
			return fmt.Errorf("route %s: work queue %w", r, err)
		}
	}
	return nil
}

// ValidateFamily checks the work queues named after queue beyond the
// first (QueueNames(queue, n)[1:]): each must be a valid queue name and
// none the poison queue. Its errors name the fields as prefix.Queue and
// prefix.PoisonQueue.
func ValidateFamily(queue, poison string, n int, prefix string) error {
	for _, name := range QueueNames(queue, n)[1:] {
		if err := storage.ValidateQueueName(name); err != nil {
			return fmt.Errorf("%s.Queue %q with %d queues: %w", prefix, queue, n, err)
		}
		if name == poison {
			return fmt.Errorf("%s.PoisonQueue = %q is one of the %d work queues", prefix, poison, n)
		}
	}
	return nil
}

// Client is the producer side of the work queue plus its poison queue.
// Queues are created on first use. A Client is safe for concurrent use.
type Client struct {
	// work is what the client drains (every route it consumes, a Queues
	// for a Client built by NewClient).
	work, poison MessageQueue
	clk          clock.Clock
	log          *slog.Logger
	// list and base let DrainOthers find the family's other queues (a
	// Client built by NewClient): list returns the names of the
	// account's queues that start with prefix.
	list       func(ctx context.Context, prefix string) ([]string, error)
	base       string
	poisonName string
	// open makes the queue called name; nil (NewClientWith): every
	// message goes to work.
	open    func(name string) (MessageQueue, error)
	n       int // throughput queues per route
	routes  map[string]Route
	fairBy  map[string]string // type → payload field of its fair key
	consume map[string]bool
	lanes   lanes
	smu     sync.Mutex
	digest  string            // of the queues DrainOthers last listed
	send    map[Route]*Queues // a route's queues, made on first use
}

// NewClient returns a Client over the queues o names (default
// DefaultQueue and DefaultPoisonQueue) of the account behind svc, a queue
// service client the caller built with its own credential
// (azqueue.NewServiceClient, NewServiceClientWithSharedKeyCredential or
// NewServiceClientFromConnectionString). It does not contact the service.
func NewClient(svc *azqueue.ServiceClient, o ClientOptions) (*Client, error) {
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, errors.New("queue: NewClient: the queue service client is nil")
	}
	open := func(name string) (MessageQueue, error) { return newAzureQueue(svc, name) }
	c, err := newRoutedClient(open, o)
	if err != nil {
		return nil, err
	}
	c.list = func(ctx context.Context, prefix string) ([]string, error) {
		var names []string
		pager := svc.NewListQueuesPager(&azqueue.ListQueuesOptions{Prefix: &prefix})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				return names, storage.Translate(err)
			}
			for _, item := range page.Queues {
				if item.Name != nil {
					names = append(names, *item.Name)
				}
			}
		}
		return names, nil
	}
	return c, nil
}

// newRoutedClient returns a Client whose queues open makes: it drains the
// default priority level of the named queues o.Consume (warm for good,
// see Queues) and the routes o.Routes gives them; the other levels and
// fairness lanes once they exist (DrainOthers finds them), and sends each
// message to its route's queues.
func newRoutedClient(open func(name string) (MessageQueue, error), o ClientOptions) (*Client, error) {
	c := &Client{clk: o.Clock, log: o.Logger, base: o.Queue, poisonName: o.PoisonQueue, open: open, n: o.Queues,
		routes: maps.Clone(o.Routes), fairBy: maps.Clone(o.FairKeyFields), consume: map[string]bool{}, send: map[Route]*Queues{}, lanes: newLanes(o.FairLanes, o.FairWeights)}
	// Always a Queues, even of one: DrainOthers can then add the queues
	// another client's larger count sends to. Its first route's default
	// level comes first.
	var work *Queues
	add := func(r Route) error {
		for _, qname := range QueueNames(RouteBase(o.Queue, r), o.Queues) {
			q, err := open(qname)
			if err != nil {
				return fmt.Errorf("queue: route %s: %w", r, err)
			}
			if work == nil {
				work, err = NewQueues(q)
				if err != nil {
					return err
				}
				continue
			}
			work.DrainLevel(q, r.Priority, c.lanes.weightOf(r.Lane), r.Priority == PriorityDefault && r.Lane == 0)
		}
		return nil
	}
	for _, name := range o.Consume {
		if !c.consume[name] {
			c.consume[name] = true
			if err := add(Route{Queue: name}.Norm()); err != nil {
				return nil, err
			}
		}
	}
	for _, typ := range slices.Sorted(maps.Keys(o.Routes)) {
		if r := o.Routes[typ].Norm(); c.consume[r.Queue] {
			if err := add(r); err != nil {
				return nil, err
			}
		}
	}
	if o.PriorityWeights != nil {
		if err := work.Weighted(o.PriorityWeights); err != nil {
			return nil, err
		}
	}
	work.setClock(o.Clock)
	poison, err := open(o.PoisonQueue)
	if err != nil {
		return nil, fmt.Errorf("queue: PoisonQueue: %w", err)
	}
	c.work, c.poison = work, poison
	return c, nil
}

// Route returns where env's message goes: the route the envelope names,
// else the one configured for its type (ClientOptions.Routes), else the
// default queue at the default priority; both fields set.
func (c *Client) Route(env Envelope) Route {
	r := Route{Queue: env.Queue, Priority: env.Priority}
	if d, ok := c.routes[env.Type]; ok {
		r.Queue = cmp.Or(r.Queue, d.Queue)
		r.Priority = cmp.Or(r.Priority, d.Priority)
	}
	r.Lane = c.lanes.of(c.FairKey(env))
	return r.Norm()
}

// FairKey returns the fair key env's message is sent by: its own, else
// the payload field its type names (ClientOptions.FairKeyFields), else "".
func (c *Client) FairKey(env Envelope) string {
	if env.FairKey != "" {
		return env.FairKey
	}
	if f, ok := c.fairBy[env.Type]; ok && env.PayloadBlob == "" {
		k, _ := payload.Field(env.Payload, f)
		return k
	}
	return ""
}

// Consumes reports whether the client drains the named queue q ("" is
// the default queue).
func (c *Client) Consumes(q string) bool {
	if c.consume == nil {
		return true
	}
	return c.consume[cmp.Or(q, DefaultRouteQueue)]
}

// sendTo returns the queues of route r, made on first use.
func (c *Client) sendTo(r Route) (MessageQueue, error) {
	if c.open == nil {
		return c.work, nil
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	if qs, ok := c.send[r]; ok {
		return qs, nil
	}
	names := QueueNames(RouteBase(c.base, r), c.n)
	qs := make([]MessageQueue, len(names))
	for i, name := range names {
		if name == c.poisonName {
			return nil, fmt.Errorf("%w: route %s: its queue %s is the poison queue", ErrMalformed, r, name)
		}
		q, err := c.open(name)
		if err != nil {
			return nil, fmt.Errorf("%w: route %s: %w", ErrMalformed, r, err)
		}
		qs[i] = q
	}
	m, err := NewQueues(qs...)
	if err != nil {
		return nil, err
	}
	c.send[r] = m
	return m, nil
}

// DrainOthers lists the account's queues named like this client's work
// queues beyond its count ({Queue}-{n}, or a route's {base}-{n}: sent to
// by a client configured with more queues) and drains those of the named
// queues it consumes too, so that nothing sent there is stranded; it
// returns the names it added. One list request (a page per 5,000
// queues). A Client not built by NewClient has nothing to add.
func (c *Client) DrainOthers(ctx context.Context) ([]string, error) {
	qs, ok := c.work.(*Queues)
	if !ok || c.list == nil {
		return nil, nil
	}
	names, err := c.list(ctx, c.base)
	if err == nil {
		c.setDigest(names)
	}
	var added []string
	for _, l := range c.listedQueues(names) {
		if c.Consumes(l.route.Queue) && qs.DrainLevel(l.q, l.route.Priority, c.lanes.weightOf(l.route.Lane), false) {
			added = append(added, l.name)
		}
	}
	if err != nil {
		return added, fmt.Errorf("list the work queues: %w", err)
	}
	return added, nil
}

// setDigest records a digest of the work queues listed (Digest).
func (c *Client) setDigest(names []string) {
	h := fnv.New64a()
	for _, n := range slices.Sorted(slices.Values(names)) {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	c.smu.Lock()
	c.digest = strconv.FormatUint(h.Sum64(), 36)
	c.smu.Unlock()
}

// Digest is a short digest of the names of the family's work queues as
// DrainOthers last listed them ("" before it has): it changes when a
// queue is added, so a worker that hears another's digest can tell
// whether it should look.
func (c *Client) Digest() string {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.digest
}

// listedQueue is a work queue of the family found in a listing.
type listedQueue struct {
	name  string
	route Route
	index int
	q     MessageQueue
}

// listedQueues opens the work queues of the family among the names a
// listing returned (the poison queue and other names left out). They
// exist, so their first request need not create them.
func (c *Client) listedQueues(names []string) []listedQueue {
	var out []listedQueue
	for _, name := range names {
		if name == c.poisonName {
			continue
		}
		r, idx, ok := ParseRouteName(c.base, name)
		if !ok {
			continue
		}
		q, err := c.open(name)
		if err != nil {
			continue
		}
		if aq, ok := q.(*AzureQueue); ok {
			aq.mu.Lock()
			aq.ready = true
			aq.mu.Unlock()
		}
		out = append(out, listedQueue{name: name, route: r, index: idx, q: q})
	}
	return out
}

// FamilyQueue is one work queue of the family, as Family finds it.
type FamilyQueue struct {
	// Name is the queue's name.
	Name string
	// Route is the named queue, priority and fairness lane it carries;
	// Index its place among the route's throughput queues (0 for the
	// first).
	Route Route
	Index int
	// Depth is its approximate message count (visible or not).
	Depth int
	// Oldest is when the message at its head was enqueued (zero when no
	// message is visible).
	Oldest time.Time
}

// Family lists the work queues of the account that belong to this
// client's family (every route, level, lane and throughput queue), with
// their depth and the enqueue time of the visible message at their head:
// one list request, then two requests per queue.
func (c *Client) Family(ctx context.Context) ([]FamilyQueue, error) {
	if c.list == nil || c.open == nil {
		return nil, errors.New("queue: Family: a client built by NewClient lists its queues")
	}
	names, err := c.list(ctx, c.base)
	if err != nil {
		return nil, fmt.Errorf("list the work queues: %w", err)
	}
	var out []FamilyQueue
	for _, l := range c.listedQueues(names) {
		f := FamilyQueue{Name: l.name, Route: l.route, Index: l.index}
		if f.Depth, err = l.q.Count(ctx); err != nil {
			return out, fmt.Errorf("queue %s: %w", l.name, err)
		}
		if f.Depth > 0 {
			head, err := l.q.Peek(ctx, 1)
			if err != nil {
				return out, fmt.Errorf("queue %s: %w", l.name, err)
			}
			if len(head) > 0 {
				f.Oldest = head[0].Inserted
			}
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b FamilyQueue) int {
		return cmp.Or(cmp.Compare(a.Route.Queue, b.Route.Queue), cmp.Compare(a.Route.Priority, b.Route.Priority),
			cmp.Compare(a.Route.Lane, b.Route.Lane), cmp.Compare(a.Index, b.Index))
	})
	return out, nil
}

// NewClientWith returns a Client over any pair of queues: AzureQueues
// built with their own clients, or MemQueues in tests and examples. The
// queue names in o are not used.
func NewClientWith(work, poison MessageQueue, o ClientOptions) *Client {
	return &Client{work: work, poison: poison, clk: clock.OrReal(o.Clock), log: orDefault(o.Logger)}
}

func orDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// Poison returns the poison queue.
func (c *Client) Poison() MessageQueue { return c.poison }

// Enqueue sends env to the work queue, visible after delay (0 for at once),
// never expiring. Azure counts the delay in whole seconds: it is rounded
// down, so the message may appear up to a second before env.Due; the
// consumer then holds it until Due. V and Enqueued are filled in when zero. An envelope
// without id or type is refused with ErrMalformed, one whose encoding
// exceeds MaxMessageSize with ErrTooLarge.
func (c *Client) Enqueue(ctx context.Context, env Envelope, delay time.Duration) error {
	if env.ID == "" || env.Type == "" {
		return fmt.Errorf("queue: enqueue: %w: envelope needs an id and a type (id %q, type %q)", ErrMalformed, env.ID, env.Type)
	}
	if delay > MaxVisibility {
		return fmt.Errorf("queue: enqueue %s: %w: %v exceeds %v", env.ID, ErrDelayTooLong, delay, MaxVisibility)
	}
	if env.Enqueued.IsZero() {
		env.Enqueued = c.clk.Now().UTC()
	}
	r := c.Route(env)
	if err := r.Validate(); err != nil {
		return fmt.Errorf("queue: enqueue %s: %w: %w", env.ID, ErrMalformed, err)
	}
	if err := ValidateFairKey(env.FairKey); err != nil {
		return fmt.Errorf("queue: enqueue %s: %w: %w", env.ID, ErrMalformed, err)
	}
	env.Queue, env.Priority = "", 0
	if r.Queue != DefaultRouteQueue {
		env.Queue = r.Queue
	}
	if r.Priority != PriorityDefault {
		env.Priority = r.Priority
	}
	text, err := encodeSized(env)
	if err != nil {
		return fmt.Errorf("queue: enqueue: %w", err)
	}
	q, err := c.sendTo(r)
	if err != nil {
		return fmt.Errorf("queue: enqueue %s: %w", env.ID, err)
	}
	if _, err := q.Enqueue(ctx, text, delay); err != nil {
		return fmt.Errorf("queue: enqueue %s: %w", env.ID, err)
	}
	return nil
}

// encodeSized encodes env and checks it against MaxMessageSize.
func encodeSized(env Envelope) (string, error) {
	text, err := env.Encode()
	if err != nil {
		return "", err
	}
	if len(text) > MaxMessageSize {
		return "", fmt.Errorf("%w: envelope %s encodes to %d bytes, the limit is %d; put the payload in a blob", ErrTooLarge, env.ID, len(text), MaxMessageSize)
	}
	return text, nil
}

// Depth returns the approximate number of messages (visible or not) in
// the work queues of the default priority level of the named queues the
// client drains, and of every route it has sent to: for a mover, the
// backlog it adds to. One request per queue.
func (c *Client) Depth(ctx context.Context) (int, error) {
	n := 0
	for _, q := range c.depthQueues() {
		k, err := q.Count(ctx)
		if err != nil {
			return n, fmt.Errorf("queue: depth of %s: %w", q.Name(), err)
		}
		n += k
	}
	return n, nil
}

// Visible counts the visible messages (work waiting for a consumer) in
// the queues Depth counts, up to n: it peeks at each queue in turn (one
// request each, up to MaxBatch messages) until n are seen. exact reports
// that every queue showed fewer than it was asked for, so count is every
// visible message; otherwise there are at least count. Depth counts
// invisible messages too: those sent early that wait for their due time
// (whoever sent them), those a consumer is working on, and those it put
// back for later (a retry's backoff, a pause, a limit).
func (c *Client) Visible(ctx context.Context, n int) (count int, exact bool, err error) {
	for _, q := range c.depthQueues() {
		if count >= n {
			return count, false, nil
		}
		ask := min(n-count, MaxBatch)
		head, err := q.Peek(ctx, ask)
		if err != nil {
			return count, false, fmt.Errorf("queue: peek at %s: %w", q.Name(), err)
		}
		count += len(head)
		if len(head) == ask {
			return count, false, nil
		}
	}
	return count, true, nil
}

// Counts reports whether env's message, sent by this client, would go to
// a queue Depth counts: a message another mover sent early is in this
// client's depth only then (a route this client neither drains nor has
// sent to is counted by nobody here). A route that is not valid goes
// nowhere and is not counted.
func (c *Client) Counts(env Envelope) bool {
	if c.open == nil {
		return true // one work queue for every route
	}
	r := c.Route(env)
	if r.Validate() != nil {
		return false
	}
	names := QueueNames(RouteBase(c.base, r), c.n)
	for _, q := range c.depthQueues() {
		if slices.Contains(names, q.Name()) {
			return true
		}
	}
	return false
}

// depthQueues returns the queues Depth counts.
func (c *Client) depthQueues() []MessageQueue {
	qs, ok := c.work.(*Queues)
	if !ok {
		return []MessageQueue{c.work}
	}
	seen := map[string]bool{}
	var count []MessageQueue
	add := func(q MessageQueue) {
		if !seen[q.Name()] {
			seen[q.Name()] = true
			count = append(count, q)
		}
	}
	for _, x := range qs.members() {
		if x.home {
			add(x.q)
		}
	}
	c.smu.Lock()
	for _, m := range c.send {
		for _, q := range m.sendTo {
			add(q)
		}
	}
	c.smu.Unlock()
	return count
}

// DeadLetter is the JSON record written to the poison queue for a message
// set aside. Its field names are a public contract, like Envelope's.
type DeadLetter struct {
	// Reason says why the message was set aside.
	Reason string `json:"reason"`
	// Body is the original message body (an Envelope for a dead run,
	// anything for a malformed message). See Truncated.
	Body string `json:"body"`
	// At is when it was set aside.
	At time.Time `json:"at"`
	// Queue is the queue the message came from.
	Queue string `json:"queue,omitempty"`
	// MessageID is the message's id in that queue.
	MessageID string `json:"message_id,omitempty"`
	// DequeueCount is how often that message had been dequeued.
	DequeueCount int64 `json:"dequeue_count,omitempty"`
	// RunID, Type and Attempts come from the envelope, when it could be read.
	RunID    string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	// Worker is the instance that set it aside.
	Worker string `json:"worker,omitempty"`
	// Truncated is set when Body was cut to fit the record into one
	// message; such a record cannot be requeued.
	Truncated bool `json:"truncated,omitempty"`

	// Poison is the poison-queue message carrying this record (filled in by
	// DeadLetters.List; not part of the JSON).
	Poison Message `json:"-"`
}

// ID returns the handle DeadLetters.Requeue accepts: the run id when known,
// else the poison message id.
func (d DeadLetter) ID() string {
	if d.RunID != "" {
		return d.RunID
	}
	return d.Poison.ID
}

// SetAside writes raw to the poison queue with reason. When raw is an
// envelope its id, type and attempts are recorded alongside.
func (c *Client) SetAside(ctx context.Context, raw string, reason string) error {
	d := DeadLetter{Reason: reason, Body: raw, Queue: c.work.Name()}
	if env, err := decodeBody(raw); err == nil {
		d.RunID, d.Type, d.Attempts = env.ID, env.Type, env.FailedAttempts
	}
	return c.setAside(ctx, d)
}

// setAside writes d to the poison queue, cutting Body if the record would
// not fit into one message.
func (c *Client) setAside(ctx context.Context, d DeadLetter) error {
	if d.At.IsZero() {
		d.At = c.clk.Now().UTC()
	}
	d.Reason = cut(d.Reason, 4<<10)
	text, err := fitRecord(d)
	if err != nil {
		return fmt.Errorf("queue: set aside: %w", err)
	}
	if _, err := c.poison.Enqueue(ctx, text, 0); err != nil {
		return fmt.Errorf("queue: set aside %s: %w", d.ID(), err)
	}
	return nil
}

func fitRecord(d DeadLetter) (string, error) {
	for range 4 {
		b, err := json.Marshal(d)
		if err != nil {
			return "", err
		}
		over := len(b) - MaxMessageSize
		if over <= 0 {
			return string(b), nil
		}
		// JSON escaping can make each byte of Body cost up to 6; cut
		// generously and check again.
		keep := len(d.Body) - over - 64
		if over*2 < len(d.Body) {
			keep = len(d.Body) - over*2 - 64
		}
		d.Body = cut(d.Body, max(keep, 0))
		d.Truncated = true
	}
	d.Body = ""
	b, err := json.Marshal(d)
	return string(b), err
}

// cut returns at most n bytes of s, cut on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// decodeBody parses a message body as an envelope. Bodies written by SDKs
// that base64-encode messages by default (.NET, Python) are accepted too
// when they decode to a valid envelope.
func decodeBody(text string) (Envelope, error) {
	env, err := DecodeEnvelope(text)
	if err == nil {
		return env, nil
	}
	t := strings.TrimSpace(text)
	if t != "" && !strings.HasPrefix(t, "{") {
		if raw, derr := base64Decode(t); derr == nil {
			if env2, err2 := DecodeEnvelope(string(raw)); err2 == nil {
				return env2, nil
			}
		}
	}
	return Envelope{}, err
}

func base64Decode(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
