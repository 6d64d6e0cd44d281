package leasecron

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// A schedule whose write committed and whose every answer was lost keeps
// the task's payload blob: the task is scheduled and would otherwise run
// without its payload (it failed every attempt fetching it, until dead).
// Plain and unique schedules alike.
func TestAScheduleWhoseAnswersAreLostKeepsItsPayload(t *testing.T) {
	for _, unique := range []bool{false, true} {
		var tr *answersLost
		c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
			tr = &answersLost{next: next, match: "id~big"}
			return tr
		})
		ctx := context.Background()
		big := strings.Repeat("x", 40<<10) // past the inline limit: a blob
		var o *ScheduleOptions
		if unique {
			o = &ScheduleOptions{Unique: &Unique{Key: "k"}}
		}
		if _, err := c.Schedule(ctx, Item{ID: "warm", Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
			t.Fatal(err) // (the tables made)
		}
		tr.armed.Store(true)
		_, err := c.Schedule(ctx, Item{ID: "big", Type: "t", Due: time.Now().Add(time.Hour), Payload: big}, o)
		tr.armed.Store(false)
		if tr.lost.Load() == 0 || err == nil {
			t.Fatalf("unique %v: no answer was lost (%d), or the schedule answered %v: the test does not reach the case", unique, tr.lost.Load(), err)
		}
		it, gerr := c.Get(ctx, "big")
		if gerr != nil || it.PayloadBlob == "" {
			t.Fatalf("unique %v: the task its lost write scheduled: %+v, %v; want it there with a payload blob", unique, it, gerr)
		}
		if b, perr := c.Payload(ctx, it.PayloadBlob); perr != nil || string(b) != big {
			t.Fatalf("unique %v: the scheduled task's payload: %d bytes, %v; want it kept", unique, len(b), perr)
		}
	}
}

// answersLost is a transport that, while armed, serves every request
// whose URL or body contains match and loses its answer.
type answersLost struct {
	next  policy.Transporter
	match string
	armed atomic.Bool
	lost  atomic.Int32
}

func (f *answersLost) Do(req *http.Request) (*http.Response, error) {
	if !f.armed.Load() {
		return f.next.Do(req)
	}
	hit, err := requestHas(req, f.match)
	if err != nil {
		return nil, err
	}
	resp, err := f.next.Do(req)
	if !hit || err != nil {
		return resp, err
	}
	_ = resp.Body.Close()
	f.lost.Add(1)
	return nil, fmt.Errorf("connection reset by peer")
}

// requestHas reports whether req's URL or body contains match, leaving
// the body readable.
func requestHas(req *http.Request, match string) (bool, error) {
	if strings.Contains(req.URL.String(), match) {
		return true, nil
	}
	if req.Body == nil {
		return false, nil
	}
	b, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return false, err
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	return bytes.Contains(b, []byte(match)), nil
}
