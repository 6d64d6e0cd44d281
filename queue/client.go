package queue

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/internal/clock"
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
	work, poison MessageQueue
	clk          clock.Clock
	log          *slog.Logger
	// svc and base let DrainOthers find the family's other queues (a
	// Client built by NewClient).
	svc  *azqueue.ServiceClient
	base string
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
	var work MessageQueue
	qs := make([]MessageQueue, o.Queues)
	for i, name := range QueueNames(o.Queue, o.Queues) {
		q, err := newAzureQueue(svc, name)
		if err != nil {
			return nil, fmt.Errorf("queue: Queue: %w", err)
		}
		qs[i] = q
	}
	// Always a Queues, even of one: DrainOthers can then add the queues
	// another client's larger count sends to.
	work, err := NewQueues(qs...)
	if err != nil {
		return nil, err
	}
	poison, err := newAzureQueue(svc, o.PoisonQueue)
	if err != nil {
		return nil, fmt.Errorf("queue: PoisonQueue: %w", err)
	}
	return &Client{work: work, poison: poison, clk: o.Clock, log: o.Logger, svc: svc, base: o.Queue}, nil
}

// DrainOthers lists the account's queues named like this client's work
// queues beyond its count ({Queue}-{n}: sent to by a client configured
// with more queues) and drains them too, so that nothing sent there is
// stranded; it returns the names it added. One list request (a page per
// 5,000 queues). A Client not built by NewClient has nothing to add.
func (c *Client) DrainOthers(ctx context.Context) ([]string, error) {
	qs, ok := c.work.(*Queues)
	if !ok || c.svc == nil {
		return nil, nil
	}
	var added []string
	pager := c.svc.NewListQueuesPager(&azqueue.ListQueuesOptions{Prefix: &c.base})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return added, fmt.Errorf("list the work queues: %w", storage.Translate(err))
		}
		for _, item := range page.Queues {
			if item.Name == nil || !familyName(c.base, *item.Name) {
				continue
			}
			q, err := newAzureQueue(c.svc, *item.Name)
			if err != nil {
				continue
			}
			if qs.Drain(q) {
				added = append(added, *item.Name)
			}
		}
	}
	return added, nil
}

// familyName reports whether name is base-{n} for a whole number n ≥ 1.
func familyName(base, name string) bool {
	rest, ok := strings.CutPrefix(name, base+"-")
	if !ok || rest == "" || rest[0] == '0' {
		return false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
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
	text, err := encodeSized(env)
	if err != nil {
		return fmt.Errorf("queue: enqueue: %w", err)
	}
	if _, err := c.work.Enqueue(ctx, text, delay); err != nil {
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

// Depth returns the approximate number of messages in the work queue
// (visible or not).
func (c *Client) Depth(ctx context.Context) (int, error) {
	n, err := c.work.Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: depth: %w", err)
	}
	return n, nil
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
