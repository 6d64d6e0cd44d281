package queue

import (
	"context"
	"fmt"
)

// Peek returns up to n (1–32) of the oldest dead letters without hiding
// them, and about how many the poison queue holds: two requests, however
// many there are (List walks the whole queue).
func (dl *DeadLetters) Peek(ctx context.Context, n int) ([]DeadLetter, int, error) {
	if n < 1 || n > MaxBatch {
		return nil, 0, fmt.Errorf("queue: peek %d dead letters: want 1..%d", n, MaxBatch)
	}
	msgs, err := dl.c.poison.Peek(ctx, n)
	if err != nil {
		return nil, 0, fmt.Errorf("queue: peek dead letters: %w", err)
	}
	total, err := dl.c.poison.Count(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("queue: count dead letters: %w", err)
	}
	out := make([]DeadLetter, len(msgs))
	for i, m := range msgs {
		out[i] = parseRecord(m)
	}
	return out, max(total, len(out)), nil
}
