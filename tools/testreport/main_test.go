package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:10: some log\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:12: want 3, got 4\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"--- FAIL: TestA (1.50s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestA","Elapsed":1.5}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: quiet\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestB","Elapsed":0.2}`,
		`{"Action":"pass","Package":"p","Test":"TestB/sub","Elapsed":0.1}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t1.7s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":1.7}`,
		`# q`,
		`q/x.go:3:1: syntax error`,
		`{"Action":"output","Package":"r","Output":"panic: boom\n"}`,
		`{"Action":"fail","Package":"r"}`,
	}, "\n")
	var out, log bytes.Buffer
	r := &report{out: &out, log: &log, buf: map[key][]string{}}
	if err := r.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if r.summary() {
		t.Error("summary reported success with failures")
	}
	got := out.String()
	for _, want := range []string{
		"--- FAIL: TestA (1.5s) in p\n    | ==== output of TestA ====\n    | === RUN   TestA\n",
		"    |     a_test.go:12: want 3, got 4\n",
		"--- PASS: TestB (200ms)\n",
		"--- SKIP: TestC (0s)\n",
		"FAIL\tp\t1.7s\n",
		"q/x.go:3:1: syntax error\n",
		"1 passed, 1 failed, 1 skipped\n",
		"FAIL p TestA\n    a_test.go:10: some log\n    a_test.go:12: want 3, got 4\n",
		"FAIL r\n    panic: boom\n",
	} {
		t.Run(want, func(t *testing.T) {
			if !strings.Contains(got, want) {
				t.Errorf("report lacks %q:\n%s", want, got)
			}
		})
	}
	if strings.Contains(got, "quiet") || strings.Contains(got, "TestB/sub") {
		t.Errorf("passing output leaked into the report:\n%s", got)
	}
	if !strings.Contains(log.String(), "quiet") {
		t.Errorf("log lacks passing output:\n%s", log.String())
	}
}

func TestAllPassed(t *testing.T) {
	var out bytes.Buffer
	r := &report{out: &out, log: &bytes.Buffer{}, buf: map[key][]string{}}
	_ = r.read(strings.NewReader(`{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.01}`))
	if !r.summary() || out.String() != "--- PASS: TestA (10ms)\n1 passed, 0 failed, 0 skipped\n" {
		t.Errorf("got %q", out.String())
	}
}

func TestIsErrorLine(t *testing.T) {
	for line, want := range map[string]bool{
		"x_test.go:12: boom":          true,
		"panic: nil map":              true,
		"panic: test timed out after": true,
		"x.go:12: not a test file":    false,
		"see x_test.go:12: in prose":  false,
		"x_test.go:ab: no line":       false,
	} {
		t.Run(fmt.Sprint(line), func(t *testing.T) {
			if got := isErrorLine(line); got != want {
				t.Errorf("isErrorLine(%q) = %v, want %v", line, got, want)
			}
		})
	}
}
