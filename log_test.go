package leasecron_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Every JSON log line of a worker names its instance exactly once, and no
// line carries any key twice. (The consumer used to add "instance" to a
// logger that already had it.)
func TestWorkerLogLinesCarryEachKeyOnce(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: "logger-1", Logger: log,
		Lease:      trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:      schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer:   queue.ConsumerSettings{PollMax: 300 * time.Millisecond, BackoffBase: time.Second},
		Blackboard: blackboard.Settings{Cycle: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	w.Handle("note", func(ctx context.Context, task leasecron.Task) error {
		if attempts++; attempts == 1 {
			return fmt.Errorf("first attempt fails") // a line from the consumer
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "n1", Type: "note", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := c.Status(ctx, "n1")
		if err == nil && s.Run != nil && s.Run.State == leasecron.RunSucceeded {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("n1 never succeeded (last %+v, %v)", s.Run, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	failed := false // the consumer logged n1's first attempt
	for _, line := range lines {
		counts, err := keyCounts(line)
		if err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		for k, n := range counts {
			if n > 1 {
				t.Errorf("key %q appears %d times in %s", k, n, line)
			}
		}
		if counts["instance"] == 0 {
			t.Errorf("no instance in %s", line)
		}
		if strings.Contains(line, `"task_id":"n1"`) && strings.Contains(line, `"attempt":1`) {
			failed = true
		}
	}
	if !failed {
		t.Errorf("no line about n1's failed attempt among %d lines: the consumer's lines were not checked", len(lines))
	}
}

// keyCounts counts the keys of a JSON object line, nested objects' keys
// under "parent.key".
func keyCounts(line string) (map[string]int, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	counts := map[string]int{}
	var walk func(prefix string) error
	walk = func(prefix string) error {
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key := prefix + tok.(string)
			counts[key]++
			if err := skipValue(dec, func() error { return walk(key + ".") }); err != nil {
				return err
			}
		}
		_, err := dec.Token() // '}'
		return err
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object (%w)", err)
	}
	return counts, walk("")
}

// skipValue reads one value; an object is handed to object.
func skipValue(dec *json.Decoder, object func() error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return object()
	case json.Delim('['):
		for dec.More() {
			if err := skipValue(dec, func() error { return skipObject(dec) }); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

func skipObject(dec *json.Decoder) error {
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			return err
		}
		if err := skipValue(dec, func() error { return skipObject(dec) }); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	return err
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var _ io.Writer = (*syncBuffer)(nil)
