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
	}{
		{line: `{"id":"a","type":"mail","payload":"plain text","in":"5m"}`, payload: "plain text", due: now.Add(5 * time.Minute)},
		{line: `{"id":"b","payload":{"x": [1, 2]},"at":"2030-02-01T00:00:00Z"}`, payload: `{"x":[1,2]}`, due: time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)},
		{line: `{"id":"c","every":"10m"}`, due: now.Truncate(time.Second).Add(10 * time.Minute), rule: "@every 10m"},
		{line: `{"id":"d","tpye":"mail"}`, err: `unknown field "tpye"`},
		{line: `{"id":"e","in":"soon"}`, err: `delay "soon"`},
		{line: `{"id":"f"} {"id":"g"}`, err: "more than one JSON value"},
		{line: `not json`, err: "not a JSON object"},
	} {
		t.Run(c.rule, func(t *testing.T) {
			it, err := parseLine([]byte(c.line), now)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("%s: err %v, want %q", c.line, err, c.err)
				}
				return
			}
			if err != nil || it.Payload != c.payload || !it.Due.Equal(c.due) || it.Recurrence != c.rule {
				t.Errorf("%s: %+v, %v", c.line, it, err)
			}
		})
	}
}
