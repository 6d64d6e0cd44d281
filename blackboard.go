package leasecron

import (
	"context"

	"github.com/leasecron/leasecron/blackboard"
)

// The blackboard operations of `leasecron blackboard` (list, add, remove,
// run-now) and of the dashboard's blackboard page.

func (c *Client) board() (*blackboard.Board, error) {
	return blackboard.NewBoard(c.sc.Table, c.o.Names.BlackboardTable)
}

// Blackboard returns every blackboard key with the state of its last run.
func (c *Client) Blackboard(ctx context.Context) ([]blackboard.Entry, error) {
	b, err := c.board()
	if err != nil {
		return nil, err
	}
	return b.List(ctx)
}

// AddBlackboardKey adds a key (its Key, Interval, Type and Payload); an
// existing key of another definition is refused (blackboard.ErrExists)
// unless o.Replace, which keeps its run history, and one of the same
// definition is left as it is (the add succeeds). A nil o is the zero
// value.
func (c *Client) AddBlackboardKey(ctx context.Context, e blackboard.Entry, o *blackboard.AddOptions) error {
	b, err := c.board()
	if err != nil {
		return err
	}
	return b.Add(ctx, e, o)
}

// RemoveBlackboardKey removes a key; an unknown key wraps ErrNotFound.
func (c *Client) RemoveBlackboardKey(ctx context.Context, key string) error {
	b, err := c.board()
	if err != nil {
		return err
	}
	return b.Remove(ctx, key)
}

// RunBlackboardKeyNow makes a key due at the next cycle regardless of its
// interval; an unknown key wraps ErrNotFound.
func (c *Client) RunBlackboardKeyNow(ctx context.Context, key string) error {
	b, err := c.board()
	if err != nil {
		return err
	}
	return b.RunNow(ctx, key)
}
