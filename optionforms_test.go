package leasecron_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/blackboard/calendar"
	"github.com/leasecron/leasecron/handler"
	"github.com/leasecron/leasecron/internal/ops"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Every package refuses a negative option the same way: its sentinel, the
// field, "= value", and "want" what is accepted with the default. (Six
// packages had six forms: "X -1s is negative", "X = -1: must not be
// negative", "X -1: must be positive", "X 65: must be between", …)
func TestOneErrorFormForNegativeOptions(t *testing.T) {
	form := regexp.MustCompile(`: [A-Za-z.]*\b(\w+) = -\S+: want .*0 for the default`)
	noop := func(context.Context, leasecrontype.Task) error { return nil }
	mem := func(string) (leasecrontype.Handler, bool) { return noop, true }
	for _, c := range []struct {
		field string
		kind  error
		err   func() error
	}{
		{"Concurrency", queue.ErrInvalidOptions, func() error {
			_, err := queue.NewConsumerWith(queue.NewMemoryQueue("w", nil), queue.NewMemoryQueue("p", nil), queue.ConsumerOptions{ConsumerSettings: queue.ConsumerSettings{Concurrency: -1}})
			return err
		}},
		{"PollMax", queue.ErrInvalidOptions, func() error {
			_, err := queue.NewConsumerWith(queue.NewMemoryQueue("w", nil), queue.NewMemoryQueue("p", nil), queue.ConsumerOptions{ConsumerSettings: queue.ConsumerSettings{PollMax: -time.Second}})
			return err
		}},
		{"Timeout", handler.ErrInvalidOptions, func() error {
			_, err := handler.HTTP(handler.HTTPOptions{URL: "http://h/", Timeout: -time.Second})
			return err
		}},
		{"KillGrace", handler.ErrInvalidOptions, func() error {
			_, err := handler.Exec(handler.ExecOptions{Argv: []string{"/bin/sh"}, KillGrace: -time.Second})
			return err
		}},
		{"MaxFeeds", calendar.ErrInvalidOptions, func() error {
			_, err := calendar.New(calendar.Options{Blobs: nopBlobs{}, MaxFeeds: -1})
			return err
		}},
		{"MaxConcurrent", blackboard.ErrInvalid, func() error {
			_, err := blackboard.NewWorkerWithStore(blackboard.NewMemoryStore(), blackboard.Options{Settings: blackboard.Settings{MaxConcurrent: -1}, Handlers: mem})
			return err
		}},
		{"Cycle", blackboard.ErrInvalid, func() error {
			_, err := blackboard.NewWorkerWithStore(blackboard.NewMemoryStore(), blackboard.Options{Settings: blackboard.Settings{Cycle: -time.Second}, Handlers: mem})
			return err
		}},
		{"ScanLimit", schedule.ErrInvalid, func() error {
			_, err := schedule.NewMemory(schedule.Options{ScanLimit: -1})
			return err
		}},
		{"MaxPayload", schedule.ErrInvalid, func() error {
			_, err := schedule.NewMemory(schedule.Options{MaxPayload: -1})
			return err
		}},
		{"ReadyTimeout", ops.ErrInvalidOptions, func() error {
			_, err := ops.NewServer(ops.Options{ReadyTimeout: -time.Second})
			return err
		}},
	} {
		t.Run(c.field, func(t *testing.T) {
			err := c.err()
			m := form.FindStringSubmatch(errString(err))
			if !errors.Is(err, c.kind) || m == nil || m[1] != c.field {
				t.Errorf("negative %s: %v; want %v and the form \"…%s = -…: want …, or 0 for the default …\"", c.field, err, c.kind, c.field)
			}
		})
	}
	// trafficcop's options have derived defaults and ranges; its refusals
	// take the same "field = value: want" form.
	_, err := trafficcop.NewCop(trafficcop.NewMemoryLock("l", nil), trafficcop.Options{Timing: trafficcop.Timing{PollEvery: -time.Second}})
	if !errors.Is(err, trafficcop.ErrInvalidOptions) || !regexp.MustCompile(`PollEvery = -1s: want `).MatchString(errString(err)) {
		t.Errorf("trafficcop PollEvery -1s: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

type nopBlobs struct{}

func (nopBlobs) WriteBlob(context.Context, string, string, []byte) error { return nil }
