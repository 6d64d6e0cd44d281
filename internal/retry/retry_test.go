package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

func TestExpAndJitter(t *testing.T) {
	base, max := 2*time.Second, 10*time.Minute
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second,
		64 * time.Second, 128 * time.Second, 256 * time.Second, 512 * time.Second, 10 * time.Minute, 10 * time.Minute}
	for i, w := range want {
		if got := Exp(base, max, i+1); got != w {
			t.Errorf("Exp(attempt %d) = %v, want %v", i+1, got, w)
		}
	}
	if got := Exp(base, max, 0); got != base {
		t.Errorf("Exp(0) = %v, want base", got)
	}
	if got := Exp(base, max, 1000); got != max {
		t.Errorf("Exp(1000) = %v, want the cap (no overflow)", got)
	}
	if got := Exp(time.Hour, time.Hour, 3); got != time.Hour {
		t.Errorf("Backoff with base == max = %v", got)
	}
	for i, r := range []float64{0, 0.25, 0.5, 0.999} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			j := Jitter(10*time.Second, r)
			if j < 5*time.Second || j > 10*time.Second {
				t.Errorf("Jitter(10s, %v) = %v, want within [5s, 10s]", r, j)
			}
		})
	}
	if Jitter(10*time.Second, 0) != 5*time.Second || Jitter(10*time.Second, 1) != 10*time.Second {
		t.Error("jitter bounds are [d/2, d]")
	}
}

// busy is a 503 ServerBusy as the SDK reports it, asking for retryAfter.
func busy(retryAfter string) error {
	resp := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}}
	if retryAfter != "" {
		resp.Header.Set("Retry-After", retryAfter)
	}
	return storage.Translate(&azcore.ResponseError{StatusCode: http.StatusServiceUnavailable, ErrorCode: "ServerBusy", RawResponse: resp})
}

func TestAfterHonoursRetryAfter(t *testing.T) {
	if d := After(busy("3"), 100*time.Millisecond, time.Second, 1, 0.5); d != 3*time.Second {
		t.Errorf("After with Retry-After 3: %s, want 3s", d)
	}
	if d := After(busy(""), 100*time.Millisecond, time.Second, 2, 0); d != 100*time.Millisecond {
		t.Errorf("After without Retry-After, 2 failures, r=0: %s, want 100ms (half of 200ms)", d)
	}
}

// Transient retries transient failures with backoff, stops at once on a
// refusal, and gives up after Tries.
func TestTransient(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	ctx := context.Background()
	// advance moves the clock past each wait Transient goes to sleep for
	// until it returns.
	advance := func(done <-chan error) error {
		for {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			werr := fc.WaitForTimers(wctx, 1)
			cancel()
			select {
			case err := <-done:
				return err
			default:
			}
			if werr == nil {
				fc.Advance(10 * time.Second)
			}
		}
	}
	run := func(fails []error) (calls int, err error) {
		done := make(chan error, 1)
		go func() {
			done <- Transient(ctx, Policy{Tries: 4, Clock: fc}, func(context.Context) error {
				calls++
				if calls <= len(fails) {
					return fails[calls-1]
				}
				return nil
			})
		}()
		return calls, advance(done)
	}
	refused := storage.Translate(&azcore.ResponseError{StatusCode: http.StatusForbidden, ErrorCode: "AuthorizationFailure"})
	for _, c := range []struct {
		name      string
		fails     []error
		wantCalls int
		wantErr   error
	}{
		{"succeeds after two busy answers", []error{busy("1"), busy("")}, 3, nil},
		{"a refusal is not retried", []error{refused}, 1, storage.ErrAuth},
		{"gives up after four tries", []error{busy(""), busy(""), busy(""), busy(""), busy("")}, 4, storage.ErrServerBusy},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls, err := run(c.fails)
			if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Errorf("err %v, want %v", err, c.wantErr)
			}
			if calls != c.wantCalls {
				t.Errorf("%d calls, want %d", calls, c.wantCalls)
			}
		})
	}
}
