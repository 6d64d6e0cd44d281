package cli

import (
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		line    string
		payload string
		due     time.Time
		rule    string
		err     string
		unique  string
	}{
		{line: `{"id":"a","type":"mail","payload":"plain text","in":"5m"}`, payload: "plain text", due: now.Add(5 * time.Minute)},
		{line: `{"id":"b","payload":{"x": [1, 2]},"at":"2030-02-01T00:00:00Z"}`, payload: `{"x":[1,2]}`, due: time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)},
		{line: `{"id":"c","every":"10m"}`, due: now.Truncate(time.Second).Add(10 * time.Minute), rule: "@every 10m"},
		{line: `{"id":"d","tpye":"mail"}`, err: `unknown field "tpye"`},
		{line: `{"id":"e","in":"soon"}`, err: `delay "soon"`},
		{line: `{"id":"f"} {"id":"g"}`, err: "more than one JSON value"},
		{line: `not json`, err: "not a JSON object"},
		{line: `{"id":"h","unique_key":"k","unique_for":"1h","unique_states":"queued,running"}`, unique: "k"},
		{line: `{"id":"i","unique_for":"1h"}`, err: "go with unique_key"},
		{line: `{"id":"j","unique_key":"k","unique_for":"soon"}`, err: `unique_for: "soon"`},
		{line: `{"id":"k","unique_key":"k","unique_states":"sleeping"}`, err: "sleeping"},
		// Checked in the first pass, so that every bad line of a file is
		// named (the library checks these only when it schedules).
		{line: `{"id":"l","queue":"GPU"}`, err: `queue: queue name "GPU"`},
		{line: `{"id":"m","type":"Mail"}`, err: `type: invalid: task type "Mail"`},
		{line: `{"id":"n o"}`, err: `id: invalid: task id "n o"`},
		{line: `{"id":"p","max_attempts":5000}`, err: "max_attempts: 5000 is not from 0 to 1000; want a whole number from 1 to 1000"},
		{line: `{"id":"q","max_attempts":-1}`, err: "max_attempts: -1 is not from 0 to 1000; want a whole number"},
		// Fields the library checks only when it schedules, which the
		// spec checks the same way for the CLI and the HTTP API (before,
		// each line was read with a partial copy of these checks).
		{line: `{"id":"r","fair_key":"` + strings.Repeat("k", 300) + `"}`, err: "fair_key: "},
		{line: `{"id":"s","after":["s"]}`, err: "after: task s cannot wait for itself"},
		{line: `{"id":"t","every":"1h","after":["a"]}`, err: "after: a recurring series cannot wait"},
		{line: `{"id":"u","unique_key":"a/b"}`, err: "unique_key: "},
		{line: `{"id":"v","unique_key":"k","unique_for":"9000h"}`, err: "unique_for: 9000h0m0s is longer than"},
		{line: `{"id":"w","at":"2030-01-01T00:00:00Z","cron":"61 * * * *"}`, err: "cron: "},
		{line: `{"id":"x","at":"2030-01-01T00:00:00Z","every":"1ms"}`, err: "every: "},
	} {
		t.Run(c.rule, func(t *testing.T) {
			it, u, err := parseLine([]byte(c.line), now)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("%s: err %v, want %q", c.line, err, c.err)
				}
				return
			}
			if c.unique != "" {
				if err != nil || u == nil || u.Key != c.unique || u.For != time.Hour || len(u.States) != 2 {
					t.Errorf("%s: unique %+v, %v", c.line, u, err)
				}
				return
			}
			if err != nil || u != nil || it.Payload != c.payload || !it.Due.Equal(c.due) || it.Recurrence != c.rule {
				t.Errorf("%s: %+v, %v", c.line, it, err)
			}
		})
	}
}
