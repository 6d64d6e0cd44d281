package leasecron

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/queue"
)

func TestRateKeyOfATask(t *testing.T) {
	for _, c := range []struct {
		key     string
		env     queue.Envelope
		want    string
		comment string
	}{
		{"", queue.Envelope{Payload: `{"customer":"c7"}`}, "", "no key: the type's budget"},
		{"payload.customer", queue.Envelope{Payload: `{"customer":"c7"}`}, "c7", "a string field"},
		{"payload.customer", queue.Envelope{Payload: `{"customer":42}`}, "42", "a number's text"},
		{"payload.customer", queue.Envelope{Payload: `{"other":1}`}, "", "no such field"},
		{"payload.customer", queue.Envelope{Payload: `not json`}, "", "not JSON"},
		{"payload.customer", queue.Envelope{Payload: `{"customer":"a/b"}`}, "", "a value no key can hold"},
		{"payload.customer", queue.Envelope{Payload: `{"customer":"` + strings.Repeat("x", 201) + `"}`}, "", "too long"},
		{"unique", queue.Envelope{UniqueKey: "u-1"}, "u-1", "the unique key"},
		{"unique", queue.Envelope{}, "", "no unique key"},
	} {
		t.Run(c.comment, func(t *testing.T) {
			if got := rateKey(c.key, c.env); got != c.want {
				t.Fatalf("rateKey(%q) = %q, want %q", c.key, got, c.want)
			}
		})
	}
}

func TestRatesAreValidated(t *testing.T) {
	for _, c := range []struct {
		rates map[string]RateLimit
		want  string
	}{
		{map[string]RateLimit{"mail": {Count: 0, Per: time.Minute}}, "count 0"},
		{map[string]RateLimit{"mail": {Count: 10, Per: 0}}, "window 0s"},
		{map[string]RateLimit{"mail": {Count: 10, Per: -time.Minute}}, "window -1m0s"},
		{map[string]RateLimit{"mail": {Count: 10, Per: time.Minute, Key: "customer"}}, `"customer"`},
		{map[string]RateLimit{"Mail": {Count: 10, Per: time.Minute}}, `"Mail"`},
	} {
		t.Run(c.want, func(t *testing.T) {
			o := WorkerOptions{Rates: c.rates}.WithDefaults()
			err := o.validate()
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("validate: %v; want ErrInvalidOptions naming %s", err, c.want)
			}
		})
	}
	if _, err := ParseRateLimit("10/0s"); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "10/0s") {
		t.Fatalf("ParseRateLimit(10/0s): %v", err)
	}
}
