package leasecron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/presence"
	"github.com/leasecron/leasecron/internal/shard"
)

// DefaultDrainCheck is the default WorkerOptions.DrainCheck.
const DefaultDrainCheck = presence.DefaultDrainEvery

// Drain asks the running worker instance id to drain: within its
// WorkerOptions.DrainCheck (10 s by default) it stops taking new work,
// finishes the tasks it runs (within its shutdown grace), hands over the
// lease and shards it holds, and stops; Worker.Run returns ErrDrained.
// Until it is gone, Instances shows it Draining. by names who asks (shown
// on the fleet page and in the worker's log); empty means user@host of
// this process. Asking again changes nothing. An id with no running
// instance is refused with an error wrapping ErrNotFound that lists the
// running ones; an instance that does not look for drain requests, with
// ErrNotDrainable.
func (c *Client) Drain(ctx context.Context, id, by string) (Instance, error) {
	if strings.TrimSpace(id) == "" {
		return Instance{}, fmt.Errorf("%w: drain: give the id of a running instance (leasecron stats, or the fleet page, lists them)", ErrInvalidOptions)
	}
	cc := c.sc.Blob.NewContainerClient(c.o.Names.Container)
	now := c.o.Clock.Now()
	p, err := presence.RequestDrain(ctx, cc, shard.MemberName(id), cmp.Or(by, whoAmI()), now)
	if errors.Is(err, presence.ErrNotPresent) {
		return Instance{}, c.noInstance(ctx, id, p, now)
	}
	if errors.Is(err, presence.ErrNoDrain) {
		return Instance{}, fmt.Errorf("%w: instance %q (version %s) does not look for drain requests: it runs an earlier release, or was told never to look (WorkerOptions.DrainCheck negative); stop it with SIGTERM, which drains it the same way",
			ErrNotDrainable, id, cmp.Or(p.Version, "unknown"))
	}
	if err != nil {
		return Instance{}, err
	}
	return Instance{ID: cmp.Or(p.ID, id), Version: p.Version, Present: true, Started: p.Started, Seen: p.Seen,
		Draining: true, DrainBy: p.DrainBy, DrainRequested: p.DrainAt, DrainStarted: p.Draining}, nil
}

// noInstance says that id is not running, and which instances are.
func (c *Client) noInstance(ctx context.Context, id string, p presence.Instance, now time.Time) error {
	if !p.Seen.IsZero() {
		return fmt.Errorf("%w: instance %q is not running: it last showed at %s (killed, or stopped without removing its presence)",
			ErrNotFound, id, p.Seen.UTC().Format(time.RFC3339))
	}
	var running []string
	if all, err := presence.List(ctx, c.sc.Blob.NewContainerClient(c.o.Names.Container)); err == nil {
		for _, in := range all {
			if in.Present(now) {
				running = append(running, in.ID)
			}
		}
	}
	if len(running) == 0 {
		return fmt.Errorf("%w: no running instance %q: no worker is running", ErrNotFound, id)
	}
	return fmt.Errorf("%w: no running instance %q; running: %s", ErrNotFound, id, strings.Join(running, ", "))
}
