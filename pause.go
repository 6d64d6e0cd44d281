package leasecron

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// Pause is a task type paused across the fleet: while it lasts no worker
// runs a task of that type; its messages wait in the queue (put back
// without counting an attempt) and run after the pause ends.
type Pause struct {
	// Type is the paused task type.
	Type string `json:"type"`
	// Since is when it was paused.
	Since time.Time `json:"since"`
	// Until is when the pause ends by itself; zero means until Resume.
	Until time.Time `json:"until,omitzero"`
	// By names who paused it (user@host, or whom PauseBy names).
	By string `json:"by,omitempty"`
}

// Pause pauses typ across the fleet until until (the zero time: until
// Resume), replacing an earlier pause of it. Workers honour it within
// WorkerOptions.Consumer.PauseCheck (5 s by default). Tasks of the type keep
// being moved into the queue when due; there they wait without using
// attempts. An until that is not in the future is refused.
func (c *Client) Pause(ctx context.Context, typ string, until time.Time) error {
	return c.PauseBy(ctx, typ, until, "")
}

// PauseBy is Pause recorded as asked by by (Pause.By), as a server that
// acts for its callers names them (the HTTP API: "token:NAME"); "" is
// Pause's user@host.
func (c *Client) PauseBy(ctx context.Context, typ string, until time.Time, by string) error {
	if err := schedule.ValidateType(typ); err != nil {
		return err
	}
	if !until.IsZero() && !until.After(c.o.Clock.Now()) {
		return fmt.Errorf("%w: pause %s until %s: that time has passed; give a future time, or none to pause until resumed",
			schedule.ErrInvalid, typ, until.UTC().Format(time.RFC3339))
	}
	_, err := c.pauses.Pause(ctx, typ, until, cmp.Or(by, whoAmI()))
	return err
}

// PauseQueue pauses a named queue across the fleet ("" or "default": the
// default queue) until until (zero: until ResumeQueue): no worker starts
// a task from it, whatever its type; its tasks wait there without using
// attempts. The pause state lists it as "queue:{name}" (Paused).
func (c *Client) PauseQueue(ctx context.Context, name string, until time.Time) error {
	if err := queue.ValidateRouteQueue(name); err != nil {
		return fmt.Errorf("%w: %w", schedule.ErrInvalid, err)
	}
	if !until.IsZero() && !until.After(c.o.Clock.Now()) {
		return fmt.Errorf("%w: pause queue %s until %s: that time has passed; give a future time, or none to pause until resumed",
			schedule.ErrInvalid, name, until.UTC().Format(time.RFC3339))
	}
	_, err := c.pauses.Pause(ctx, queue.QueuePauseKey(name), until, whoAmI())
	return err
}

// ResumeQueue ends the pause of a named queue; a queue that is not paused
// is reported with an error wrapping ErrNotFound.
func (c *Client) ResumeQueue(ctx context.Context, name string) error {
	if err := queue.ValidateRouteQueue(name); err != nil {
		return fmt.Errorf("%w: %w", schedule.ErrInvalid, err)
	}
	return c.pauses.Resume(ctx, queue.QueuePauseKey(name))
}

// Resume ends the pause of typ. Workers take its tasks up again within
// WorkerOptions.Consumer.PauseCheck. A type that is not paused is reported with an
// error wrapping ErrNotFound.
func (c *Client) Resume(ctx context.Context, typ string) error {
	if err := schedule.ValidateType(typ); err != nil {
		return err
	}
	return c.pauses.Resume(ctx, typ)
}

// Paused lists the task types paused now, by name.
func (c *Client) Paused(ctx context.Context) ([]Pause, error) {
	es, err := c.pauses.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Pause, len(es))
	for i, e := range es {
		out[i] = Pause{Type: e.Type, Since: e.Since, Until: e.Until, By: e.By}
	}
	return out, nil
}

// whoAmI names the pauser: user@host.
func whoAmI() string {
	host, _ := os.Hostname()
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username + "@" + host
	}
	return host
}
