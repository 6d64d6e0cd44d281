package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestUniqueFromConcurrentProcesses: 100 schedules of one type and unique
// key from 10 processes at a time make exactly one task; the other 99 exit
// with code 4 and print its id.
func TestUniqueFromConcurrentProcesses(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type answer struct {
		code int
		out  string
	}
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 10 {
				out, stderr, err := f.CLI(ctx, "schedule", "--in", "1h", "--type", "invoice", "--unique-key", "customer-7", "--unique-for", "1h", `{"customer":7}`)
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else if err != nil {
					t.Errorf("schedule: %v", err)
					return
				}
				if code != 0 && code != 4 {
					t.Errorf("schedule: exit %d: %s", code, stderr)
				}
				mu.Lock()
				answers = append(answers, answer{code, strings.TrimSpace(out)})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	created, dups := "", 0
	for _, a := range answers {
		switch a.code {
		case 0:
			if created != "" {
				t.Fatalf("two tasks created: %s and %s", created, a.out)
			}
			created = a.out
		case 4:
			dups++
		}
	}
	if created == "" || dups != 99 {
		t.Fatalf("created %q, %d duplicates; want one task and 99 duplicates", created, dups)
	}
	for _, a := range answers {
		if a.out != created {
			t.Fatalf("an answer names %q, want the one task %s", a.out, created)
		}
	}
	out, stderr, err := f.CLI(ctx, "list", "--json")
	if err != nil {
		t.Fatalf("list: %v %s", err, stderr)
	}
	var l struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Items) != 1 || l.Items[0].ID != created {
		t.Fatalf("pending: %s (%v); want only %s", out, err, created)
	}
	// The refusals a user can make.
	for _, bad := range [][]string{
		{"schedule", "--unique-key", "a/b", "x"},
		{"schedule", "--unique-for", "1h", "x"},
		{"schedule", "--unique-key", "k", "--unique-for", "-1m", "x"},
		{"schedule", "--unique-key", "k", "--unique-states", "sleeping", "x"},
		{"schedule", "--unique-key", "k", "--replace", "x"},
	} {
		_, stderr, err := f.CLI(ctx, bad...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: %v %s; want exit 2", bad, err, stderr)
		}
	}
}
