package leasecron

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasecron/leasecron/queue"
)

// QueueStatus is one named queue at one priority level, as Client.Queues
// reports it: the work queues that carry it (its throughput queues and
// fairness lanes) summed.
type QueueStatus struct {
	// Queue is the named queue ("default" for the default queue).
	Queue string `json:"queue"`
	// Priority is the level, 1 (critical) to 4 (low).
	Priority int `json:"priority"`
	// Depth is the approximate number of messages (visible or not).
	Depth int `json:"depth"`
	// Oldest is when the oldest message at the head of one of its work
	// queues was enqueued (zero when none is visible); OldestWait is how
	// long ago that was.
	Oldest     time.Time     `json:"oldest,omitzero"`
	OldestWait time.Duration `json:"oldest_wait_ns,omitempty"`
	// WorkQueues are the storage queues that carry it; Lanes how many of
	// them are fairness lanes.
	WorkQueues []string `json:"work_queues"`
	Lanes      int      `json:"lanes,omitempty"`
	// Consumers are the running workers that consume the named queue (as
	// their presence says; a worker of a release before named queues
	// shows under the default queue).
	Consumers []string `json:"consumers"`
}

// Queues reports every named queue and priority level that has work
// queues in the account, with their depth, the wait of their oldest
// message and the workers that consume them: one list request, two
// requests per work queue, and the presence list.
func (c *Client) Queues(ctx context.Context) ([]QueueStatus, error) {
	family, err := c.queue.Family(ctx)
	if err != nil {
		return nil, err
	}
	instances, err := c.Instances(ctx)
	if err != nil {
		return nil, err
	}
	consumers := map[string][]string{}
	for _, in := range instances {
		if !in.Present {
			continue
		}
		qs := in.Queues
		if qs == nil {
			qs = []string{queue.DefaultRouteQueue}
		}
		for _, q := range qs {
			consumers[q] = append(consumers[q], in.ID)
		}
	}
	now := c.o.Clock.Now()
	var out []QueueStatus
	for _, f := range family {
		r := f.Route.Norm()
		i := slices.IndexFunc(out, func(s QueueStatus) bool { return s.Queue == r.Queue && s.Priority == r.Priority })
		if i < 0 {
			cs := consumers[r.Queue]
			if cs == nil {
				cs = []string{}
			}
			out = append(out, QueueStatus{Queue: r.Queue, Priority: r.Priority, WorkQueues: []string{}, Consumers: cs})
			i = len(out) - 1
		}
		s := &out[i]
		s.Depth += f.Depth
		s.WorkQueues = append(s.WorkQueues, f.Name)
		if r.Lane > 0 && f.Index == 0 {
			s.Lanes++
		}
		if !f.Oldest.IsZero() && (s.Oldest.IsZero() || f.Oldest.Before(s.Oldest)) {
			s.Oldest = f.Oldest
			s.OldestWait = max(now.Sub(f.Oldest), 0)
		}
	}
	slices.SortFunc(out, func(a, b QueueStatus) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Priority, b.Priority))
	})
	return out, nil
}

// RouteOf returns the route a pending task's messages take: the task's own
// queue and priority, else those its type is routed to (ClientOptions.
// Routing), else the default queue at priority 3; and the fairness lane of
// its fair key (its own, else its type's payload field).
func (c *Client) RouteOf(it Item) Route {
	return c.queue.Route(queue.Envelope{Type: it.Type, Queue: it.Queue, Priority: it.Priority, FairKey: it.FairKey, Payload: it.Payload, PayloadBlob: it.PayloadBlob})
}

// FairKeyOf returns the fair key a pending task's messages are sent by:
// its own (Item.FairKey), else the payload field its type names
// (Routing.FairKeys), else "".
func (c *Client) FairKeyOf(it Item) string {
	return c.queue.FairKey(queue.Envelope{Type: it.Type, FairKey: it.FairKey, Payload: it.Payload, PayloadBlob: it.PayloadBlob})
}

// String is a one-line summary ("gpu/1: 12 messages").
func (s QueueStatus) String() string {
	return fmt.Sprintf("%s/%d: %d messages", s.Queue, s.Priority, s.Depth)
}
