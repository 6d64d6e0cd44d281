package leasecron

import (
	"context"

	"github.com/leasecron/leasecron/queue"
)

// DeadLetterPeek is what PeekDeadLetters saw.
type DeadLetterPeek struct {
	// DeadLetters are the oldest dead letters, at most the number asked
	// for (the service shows at most 32 without taking them).
	DeadLetters []queue.DeadLetter
	// Total is how many the poison queue holds (approximate, as the
	// service counts).
	Total int
}

// PeekDeadLetters returns the oldest n dead letters without taking them,
// and how many there are.
func (c *Client) PeekDeadLetters(ctx context.Context, n int) (DeadLetterPeek, error) {
	letters, total, err := c.dead.Peek(ctx, n)
	return DeadLetterPeek{DeadLetters: letters, Total: total}, err
}

// DeadLetters returns the dead-letter operations (list, requeue, purge).
func (c *Client) DeadLetters() *queue.DeadLetters { return c.dead }
