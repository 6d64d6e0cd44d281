package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/schedule"
)

// fileBatch is schedule --batch, --on-complete and --on-complete-payload.
type fileBatch struct {
	ID, OnComplete, Payload string
}

// options returns the ScheduleMany options of b.
func (b fileBatch) options(o *leasecron.ScheduleManyOptions) error {
	if b.Payload != "" && b.OnComplete == "" {
		return usagef("--on-complete-payload goes with --on-complete")
	}
	o.Batch = b.ID
	if b.OnComplete != "" {
		o.OnComplete = &leasecron.Item{Type: b.OnComplete, Payload: b.Payload, Due: time.Now()}
	}
	return nil
}

// lineResult is what `schedule --file --json` prints per line.
type lineResult struct {
	Line   int       `json:"line"`
	ID     string    `json:"id,omitempty"`
	Status string    `json:"status"` // scheduled, invalid, duplicate, held, not_written, moved
	Due    time.Time `json:"due,omitzero"`
	Error  string    `json:"error,omitempty"`
}

// parseLine turns one line (a leasecron.TaskSpec) into an item. The
// spec's checks cover every field the library would refuse when it
// schedules (a bad line elsewhere in the file stops that, and these lines
// were then reported "not written" instead of by what is wrong with them).
func parseLine(b []byte, now time.Time) (leasecron.Item, *leasecron.Unique, error) {
	spec, err := leasecron.ParseTaskSpec(b)
	if err != nil {
		return leasecron.Item{}, nil, withAccepted(err)
	}
	it, u, err := spec.Item(now)
	if err != nil {
		return leasecron.Item{}, nil, withAccepted(err)
	}
	return it, u, nil
}

// withAccepted adds what a field accepts to a spec error that does not
// say it ("max_attempts: -1 is negative"). (A line that is no object
// lists the fields already.)
func withAccepted(err error) error {
	var se *leasecron.SpecError
	if errors.As(err, &se) && se.Field != "" && se.Accepted != "" && !strings.Contains(err.Error(), "want") {
		return fmt.Errorf("%w; want %s", err, se.Accepted)
	}
	return err
}

// scheduleFile is `schedule --file PATH`: one task per line, scheduled with
// Client.ScheduleMany. Every line is read and checked first; a malformed
// line is reported with its number and, without partial, nothing is
// scheduled.
func (a *app) scheduleFile(ctx context.Context, path string, partial, asJSON bool, batch fileBatch) error {
	var o leasecron.ScheduleManyOptions
	if err := batch.options(&o); err != nil {
		return err
	}
	var r io.Reader = a.in //nolint:staticcheck // r becomes a file below
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return usagef("--file: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return usagef("--file %q is a directory; want a JSON Lines file (one task a line), or - for stdin", path)
		}
		r = f
	}
	now := time.Now()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 2*a.cfg.Payload.MaxSize+64<<10)
	var (
		items   []leasecron.Item
		uniques []*leasecron.Unique
		anyUniq bool
		lineOf  []int
		results []lineResult
		bad     int
	)
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		it, u, err := parseLine(b, now)
		if err != nil {
			bad++
			results = append(results, lineResult{Line: n, ID: idOf(b), Status: "invalid", Error: err.Error()})
			continue
		}
		items, uniques = append(items, it), append(uniques, u)
		anyUniq = anyUniq || u != nil
		lineOf = append(lineOf, n)
	}
	if err := sc.Err(); err != nil {
		return usagef("reading %s: %v (a line may hold at most twice payload.max_size)", path, err)
	}
	if len(items) == 0 && bad == 0 {
		return usagef("%s holds no tasks", path)
	}
	var res []leasecron.ScheduleResult
	var manyErr error // ScheduleMany's error beside its results
	if bad == 0 || partial {
		cl, err := a.client()
		if err != nil {
			return err
		}
		o.Partial = partial
		if anyUniq {
			o.Unique = uniques
		}
		res, err = cl.ScheduleMany(ctx, items, o)
		manyErr = err
		if res == nil && err != nil {
			// Refused as a whole (a cycle, an unknown parent, a batch id
			// taken): nothing was written.
			if errors.Is(err, schedule.ErrInvalid) || errors.Is(err, leasecron.ErrAlreadyScheduled) {
				return usageError{err}
			}
			return err
		}
	}
	invalid := bad
	scheduled, held := 0, 0
	for k, it := range items {
		lr := lineResult{Line: lineOf[k], ID: it.ID, Due: it.Due}
		switch {
		case res == nil:
			lr.Status, lr.Error = "not_written", "not written: another line of the file was refused"
		case res[k].Err == nil:
			lr.Status, lr.ID, lr.Due = "scheduled", res[k].Item.ID, res[k].Item.Due
			scheduled++
		default:
			lr.Error = res[k].Err.Error()
			var dup *leasecron.DuplicateError
			switch err := res[k].Err; {
			case errors.As(err, &dup):
				lr.Status, lr.ID = "held", dup.ID
				held++
			case errors.Is(err, schedule.ErrInvalid) || errors.Is(err, schedule.ErrBadRecurrence) || errors.Is(err, schedule.ErrPayloadTooLarge):
				lr.Status = "invalid"
				invalid++
			case errors.Is(err, leasecron.ErrAlreadyScheduled):
				lr.Status = "duplicate"
			case errors.Is(err, schedule.ErrMovedBeforeRollback):
				lr.Status = "moved"
			default:
				lr.Status = "not_written"
			}
		}
		results = append(results, lr)
	}
	slices.SortFunc(results, func(x, y lineResult) int { return x.Line - y.Line })
	if asJSON {
		if err := a.printJSON(results); err != nil {
			return err
		}
	} else {
		for _, lr := range results {
			if lr.Status != "scheduled" {
				id := lr.ID
				if id == "" {
					id = "(no id)"
				}
				fmt.Fprintf(a.out, "line %d: %s %s: %s\n", lr.Line, id, strings.ReplaceAll(lr.Status, "_", " "), lr.Error)
			}
		}
		fmt.Fprintf(a.out, "%d of %d tasks scheduled\n", scheduled, len(results))
		if scheduled > 0 && len(res) > 0 && res[0].Item.Batch != "" {
			fmt.Fprintf(a.out, "batch %s (leasecron batch %s)\n", res[0].Item.Batch, res[0].Item.Batch)
		}
	}
	switch {
	case errors.Is(manyErr, leasecron.ErrIncomplete):
		// The tasks were written, their batch not sealed (its callback
		// may never run): said, and exit 1, whatever the lines say.
		return manyErr
	case scheduled == len(results):
		return nil
	case scheduled+held == len(results):
		return fmt.Errorf("%w: %d of %d tasks not created: their unique keys are held (the lines name the holders)", leasecron.ErrDuplicate, held, len(results))
	case invalid > 0 && scheduled == 0:
		return usagef("%d of %d lines refused as invalid; nothing was scheduled", invalid, len(results))
	default:
		return fmt.Errorf("%d of %d tasks not scheduled", len(results)-scheduled, len(results))
	}
}

// idOf returns the "id" of a line that could not be read, when it has one.
func idOf(b []byte) string {
	var l struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(b, &l)
	return l.ID
}
