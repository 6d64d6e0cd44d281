package leasecrontype

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestParseProgress(t *testing.T) {
	long := strings.Repeat("é", MaxProgressMessage) // 2 bytes each
	for _, c := range []struct {
		in      string
		percent int
		message string
		bad     string // a word the refusal names
	}{
		{in: "42", percent: 42},
		{in: "42%", percent: 42},
		{in: " 0 starting ", percent: 0, message: "starting"},
		{in: "100 done: 1,000 of 1,000 files", percent: 100, message: "done: 1,000 of 1,000 files"},
		{in: "7 " + long, percent: 7, message: long[:MaxProgressMessage]},
		{in: "", bad: `""`},
		{in: "lots", bad: `"lots"`},
		{in: "4.5 half", bad: `"4.5 half"`},
		{in: "101", bad: "percent 101"},
		{in: "-1 back", bad: "percent -1"},
	} {
		p, err := ParseProgress(c.in)
		if c.bad != "" {
			if !errors.Is(err, ErrInvalidProgress) || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("ParseProgress(%q) = %+v, %v; want ErrInvalidProgress naming %s", c.in, p, err, c.bad)
			}
			continue
		}
		if err != nil || p.Percent != c.percent || p.Message != c.message {
			t.Errorf("ParseProgress(%q) = %+v, %v; want %d%% %q", c.in, p, err, c.percent, c.message)
		}
	}
}

func TestReportProgressReachesTheContextsFunc(t *testing.T) {
	if err := ReportProgress(context.Background(), 10, "outside a handler"); err != nil {
		t.Errorf("outside a handler: %v, want nothing done", err)
	}
	var got []RunProgress
	ctx := WithProgressFunc(context.Background(), func(p RunProgress) { got = append(got, p) })
	if err := ReportProgress(ctx, 30, "a third"); err != nil {
		t.Fatal(err)
	}
	if err := ReportProgress(ctx, 200, "too far"); !errors.Is(err, ErrInvalidProgress) {
		t.Errorf("200%%: %v, want ErrInvalidProgress", err)
	}
	if len(got) != 1 || got[0].Percent != 30 || got[0].Message != "a third" {
		t.Errorf("reports %+v, want only 30%% a third", got)
	}
	if s := (RunProgress{}).String(); s != "" {
		t.Errorf("no report prints %q", s)
	}
}
