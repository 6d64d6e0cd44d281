package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

	"github.com/leasecron/leasecron/internal/ctxlock"
	"github.com/leasecron/leasecron/internal/storage"
)

// Message is one queue message as the consumer sees it.
type Message struct {
	// ID is the service's message id.
	ID string
	// PopReceipt authorises Update and Delete; every Dequeue and Update
	// hands out a new one.
	PopReceipt string
	// Text is the message body.
	Text string
	// DequeueCount is how many times the message has been dequeued.
	DequeueCount int64
	// Inserted is when the message was enqueued.
	Inserted time.Time
	// Expires is when the service deletes the message (far in the future
	// for messages sent with a time-to-live of -1).
	Expires time.Time
	// queue is the index of the queue it came from in a Queues (0
	// otherwise).
	queue int
	// NextVisible is when the message becomes visible again.
	NextVisible time.Time
}

// MessageQueue is the small storage seam the producer and consumer use: one
// queue. AzureQueue implements it over Azure Queue storage and MemoryQueue in
// memory. The Azure implementation counts visibility in whole seconds (the
// service's unit): it rounds an initial delay (Enqueue) down, so a message
// delayed until a due time appears up to a second early rather than late
// (the consumer holds such a message until its envelope's Due), and every
// other visibility duration up.
type MessageQueue interface {
	// Name returns the queue name.
	Name() string
	// Enqueue adds a message that never expires (time-to-live -1) and
	// stays invisible for visibility (at most visibility: the Azure
	// implementation rounds it down to whole seconds).
	Enqueue(ctx context.Context, text string, visibility time.Duration) (Message, error)
	// Dequeue takes up to max (1–32) visible messages and hides them for
	// visibility.
	Dequeue(ctx context.Context, max int, visibility time.Duration) ([]Message, error)
	// Peek returns up to max (1–32) visible messages without hiding them.
	Peek(ctx context.Context, max int) ([]Message, error)
	// Update replaces m's text and hides it for visibility from now,
	// returning m with its new pop receipt. A message that is gone or whose
	// receipt is stale fails with ErrMessageGone.
	Update(ctx context.Context, m Message, text string, visibility time.Duration) (Message, error)
	// Delete removes m. A message that is gone or whose receipt is stale
	// fails with ErrMessageGone.
	Delete(ctx context.Context, m Message) error
	// Count returns the approximate number of messages.
	Count(ctx context.Context) (int, error)
	// Clear deletes every message.
	Clear(ctx context.Context) error
}

// ErrMessageGone: the message was deleted, or its pop receipt is stale
// because the message became visible and was dequeued again. It wraps
// storage.ErrNotFound.
var ErrMessageGone = fmt.Errorf("queue message gone or pop receipt stale: %w", storage.ErrNotFound)

// MaxVisibility is the longest visibility timeout or delay the service
// accepts.
const MaxVisibility = 7 * 24 * time.Hour

// AzureQueue is a MessageQueue over an Azure Storage queue. The queue is
// created on first use.
type AzureQueue struct {
	name  string
	qc    *azqueue.QueueClient
	mu    ctxlock.Mutex // held across the queue's creation
	ready bool
}

// NewAzureQueue returns the MessageQueue over qc, a client for one queue
// (from azqueue.ServiceClient.NewQueueClient or
// azqueue.NewQueueClientFromConnectionString, with its own credential). It
// does not contact the service; the queue is created on first use.
func NewAzureQueue(qc *azqueue.QueueClient) (*AzureQueue, error) {
	if qc == nil {
		return nil, errors.New("queue: NewAzureQueue: the queue client is nil")
	}
	name, err := storage.NameFromURL(qc.URL(), storage.ValidateQueueName)
	if err != nil {
		return nil, fmt.Errorf("queue: NewAzureQueue: queue client %w", err)
	}
	return &AzureQueue{name: name, qc: qc}, nil
}

// newAzureQueue returns the AzureQueue called name of svc.
func newAzureQueue(svc *azqueue.ServiceClient, name string) (*AzureQueue, error) {
	if err := storage.ValidateQueueName(name); err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, errors.New("the queue service client is nil")
	}
	return &AzureQueue{name: name, qc: svc.NewQueueClient(name)}, nil
}

// Name implements MessageQueue.
func (q *AzureQueue) Name() string { return q.name }

func (q *AzureQueue) ensure(ctx context.Context) error {
	if err := q.mu.LockContext(ctx); err != nil {
		return err
	}
	defer q.mu.Unlock()
	if q.ready {
		return nil
	}
	_, err := q.qc.Create(ctx, nil)
	if err = storage.Translate(err); err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
		return fmt.Errorf("create queue %s: %w", q.name, err)
	}
	q.ready = true
	return nil
}

// recreated reports whether err says the queue is missing (deleted while
// this process used it) and the queue was created again.
func (q *AzureQueue) recreated(ctx context.Context, err error) bool {
	if err == nil || !queueerror.HasCode(err, queueerror.QueueNotFound) {
		return false
	}
	q.mu.Lock()
	q.ready = false
	q.mu.Unlock()
	return q.ensure(ctx) == nil
}

// secondsDown converts an initial delay to whole seconds, rounding down,
// within [0, 7 days]: a message delayed until its due time must never
// appear late; the consumer holds one that appears early until it is due.
func secondsDown(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	if d > MaxVisibility {
		d = MaxVisibility
	}
	return int32(d / time.Second)
}

// seconds converts d to whole seconds, rounding up, within [0, 7 days].
func seconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	if d > MaxVisibility {
		d = MaxVisibility
	}
	return int32(math.Ceil(d.Seconds()))
}

// translate maps queue errors: a missing message or a stale pop receipt
// becomes ErrMessageGone, everything else goes through storage.Translate.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if queueerror.HasCode(err, queueerror.MessageNotFound, queueerror.PopReceiptMismatch) {
		return fmt.Errorf("%w: %w", ErrMessageGone, err)
	}
	return storage.Translate(err)
}

// Enqueue implements MessageQueue.
func (q *AzureQueue) Enqueue(ctx context.Context, text string, visibility time.Duration) (Message, error) {
	if err := q.ensure(ctx); err != nil {
		return Message{}, err
	}
	opts := &azqueue.EnqueueMessageOptions{
		TimeToLive:        to.Ptr(int32(-1)),
		VisibilityTimeout: to.Ptr(secondsDown(visibility)),
	}
	resp, err := q.qc.EnqueueMessage(ctx, text, opts)
	if q.recreated(ctx, err) {
		resp, err = q.qc.EnqueueMessage(ctx, text, opts)
	}
	if err = translate(err); err != nil {
		return Message{}, fmt.Errorf("enqueue to %s: %w", q.name, err)
	}
	m := Message{Text: text}
	if len(resp.Messages) > 0 {
		e := resp.Messages[0]
		m.ID, m.PopReceipt = deref(e.MessageID), deref(e.PopReceipt)
		m.Inserted, m.Expires, m.NextVisible = derefT(e.InsertionTime), derefT(e.ExpirationTime), derefT(e.TimeNextVisible)
	}
	return m, nil
}

// Dequeue implements MessageQueue.
func (q *AzureQueue) Dequeue(ctx context.Context, max int, visibility time.Duration) ([]Message, error) {
	if err := q.ensure(ctx); err != nil {
		return nil, err
	}
	vis := seconds(visibility)
	if vis < 1 {
		vis = 1
	}
	resp, err := q.qc.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{
		NumberOfMessages:  to.Ptr(clampBatch(max)),
		VisibilityTimeout: to.Ptr(vis),
	})
	if q.recreated(ctx, err) {
		return nil, nil
	}
	if err = translate(err); err != nil {
		return nil, fmt.Errorf("dequeue from %s: %w", q.name, err)
	}
	out := make([]Message, 0, len(resp.Messages))
	for _, d := range resp.Messages {
		if d == nil {
			continue
		}
		out = append(out, Message{
			ID: deref(d.MessageID), PopReceipt: deref(d.PopReceipt), Text: deref(d.MessageText),
			DequeueCount: derefI(d.DequeueCount), Inserted: derefT(d.InsertionTime),
			Expires: derefT(d.ExpirationTime), NextVisible: derefT(d.TimeNextVisible),
		})
	}
	return out, nil
}

// Peek implements MessageQueue.
func (q *AzureQueue) Peek(ctx context.Context, max int) ([]Message, error) {
	if err := q.ensure(ctx); err != nil {
		return nil, err
	}
	resp, err := q.qc.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(clampBatch(max))})
	if err = translate(err); err != nil {
		return nil, fmt.Errorf("peek %s: %w", q.name, err)
	}
	out := make([]Message, 0, len(resp.Messages))
	for _, p := range resp.Messages {
		if p == nil {
			continue
		}
		out = append(out, Message{
			ID: deref(p.MessageID), Text: deref(p.MessageText), DequeueCount: derefI(p.DequeueCount),
			Inserted: derefT(p.InsertionTime), Expires: derefT(p.ExpirationTime),
		})
	}
	return out, nil
}

// Update implements MessageQueue.
func (q *AzureQueue) Update(ctx context.Context, m Message, text string, visibility time.Duration) (Message, error) {
	resp, err := q.qc.UpdateMessage(ctx, m.ID, m.PopReceipt, text, &azqueue.UpdateMessageOptions{
		VisibilityTimeout: to.Ptr(seconds(visibility)),
	})
	if err = translate(err); err != nil {
		return m, fmt.Errorf("update message %s in %s: %w", m.ID, q.name, err)
	}
	m.Text = text
	m.PopReceipt = deref(resp.PopReceipt)
	m.NextVisible = derefT(resp.TimeNextVisible)
	return m, nil
}

// Delete implements MessageQueue.
func (q *AzureQueue) Delete(ctx context.Context, m Message) error {
	_, err := q.qc.DeleteMessage(ctx, m.ID, m.PopReceipt, nil)
	if err = translate(err); err != nil {
		return fmt.Errorf("delete message %s from %s: %w", m.ID, q.name, err)
	}
	return nil
}

// Count implements MessageQueue.
func (q *AzureQueue) Count(ctx context.Context) (int, error) {
	if err := q.ensure(ctx); err != nil {
		return 0, err
	}
	resp, err := q.qc.GetProperties(ctx, nil)
	if err = translate(err); err != nil {
		return 0, fmt.Errorf("count %s: %w", q.name, err)
	}
	if resp.ApproximateMessagesCount == nil {
		return 0, nil
	}
	return int(*resp.ApproximateMessagesCount), nil
}

// Clear implements MessageQueue.
func (q *AzureQueue) Clear(ctx context.Context) error {
	if err := q.ensure(ctx); err != nil {
		return err
	}
	_, err := q.qc.ClearMessages(ctx, nil)
	if err = translate(err); err != nil {
		return fmt.Errorf("clear %s: %w", q.name, err)
	}
	return nil
}

func clampBatch(n int) int32 {
	if n < 1 {
		return 1
	}
	if n > MaxBatch {
		return MaxBatch
	}
	return int32(n)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefI(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefT(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}
