// Command testreport turns the JSON stream of `go test -json` into the short
// report `make test` prints: one line per top-level test, every line of a
// failing test's output printed right where the test fails (so any excerpt
// holding the FAIL line also holds the reason), and a closing summary that
// repeats each failure with its first error lines.
//
// Usage:
//
//	go test -json ./... 2>&1 | go run ./testreport (in tools/) -log test.log
//
// The full, human-readable output of every test goes to the -log file. The
// exit status is 1 when any test or package failed, 0 otherwise.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json output.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// maxFailLines caps how much of one failing test's output is repeated.
const maxFailLines = 150

type key struct{ pkg, test string }

type report struct {
	out      io.Writer
	log      io.Writer
	buf      map[key][]string
	passed   int
	skipped  int
	failures []failure
	badPkgs  []string
}

type failure struct {
	pkg, test string
	errs      []string
}

func main() {
	logPath := flag.String("log", "", "file that receives the full output of every test")
	flag.Parse()
	r := &report{out: os.Stdout, log: io.Discard, buf: map[key][]string{}}
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		defer f.Close()
		r.log = f
	}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if !r.summary() {
		os.Exit(1)
	}
}

func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			// Build errors and anything else go test printed outside JSON.
			fmt.Fprintln(r.out, line)
			fmt.Fprintln(r.log, line)
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) handle(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "output", "build-output":
		fmt.Fprint(r.log, e.Output)
		r.buf[k] = append(r.buf[k], strings.TrimRight(e.Output, "\n"))
		if e.Test == "" && isPackageLine(e.Output) {
			fmt.Fprint(r.out, e.Output)
		}
	case "pass":
		if e.Test != "" && !strings.Contains(e.Test, "/") {
			r.passed++
			fmt.Fprintf(r.out, "--- PASS: %s (%s)\n", e.Test, secs(e.Elapsed))
		}
		delete(r.buf, k)
	case "skip":
		if e.Test != "" && !strings.Contains(e.Test, "/") {
			r.skipped++
			fmt.Fprintf(r.out, "--- SKIP: %s (%s)\n", e.Test, secs(e.Elapsed))
		}
		delete(r.buf, k)
	case "fail":
		lines := r.buf[k]
		delete(r.buf, k)
		if e.Test == "" {
			// A package failure that no test explains: a panic, a timeout, a
			// build error, TestMain exiting.
			if !r.explained(e.Package) {
				r.failures = append(r.failures, failure{pkg: e.Package, errs: errorLines(lines)})
				r.dump(e.Package, "", lines)
			}
			r.badPkgs = append(r.badPkgs, e.Package)
			return
		}
		fmt.Fprintf(r.out, "--- FAIL: %s (%s) in %s\n", e.Test, secs(e.Elapsed), e.Package)
		r.dump(e.Package, e.Test, lines)
		r.failures = append(r.failures, failure{pkg: e.Package, test: e.Test, errs: errorLines(lines)})
	}
}

// explained reports whether a test of pkg has already failed.
func (r *report) explained(pkg string) bool {
	for _, f := range r.failures {
		if f.pkg == pkg {
			return true
		}
	}
	return false
}

func (r *report) dump(pkg, test string, lines []string) {
	name := pkg
	if test != "" {
		name = test
	}
	if len(lines) > maxFailLines {
		fmt.Fprintf(r.out, "    | ... %d earlier lines in the log\n", len(lines)-maxFailLines)
		lines = lines[len(lines)-maxFailLines:]
	}
	fmt.Fprintf(r.out, "    | ==== output of %s ====\n", name)
	for _, l := range lines {
		fmt.Fprintf(r.out, "    | %s\n", l)
	}
}

// summary prints the totals and the failures and reports whether all passed.
func (r *report) summary() bool {
	fmt.Fprintf(r.out, "%d passed, %d failed, %d skipped\n", r.passed, r.countFailedTests(), r.skipped)
	if len(r.failures) == 0 && len(r.badPkgs) == 0 {
		return true
	}
	sort.SliceStable(r.failures, func(i, j int) bool { return r.failures[i].pkg < r.failures[j].pkg })
	fmt.Fprintln(r.out, "==== failures ====")
	for _, f := range r.failures {
		name := f.pkg
		if f.test != "" {
			name = f.pkg + " " + f.test
		}
		fmt.Fprintf(r.out, "FAIL %s\n", name)
		for _, l := range f.errs {
			fmt.Fprintf(r.out, "    %s\n", strings.TrimSpace(l))
		}
	}
	return false
}

func (r *report) countFailedTests() int {
	n := 0
	for _, f := range r.failures {
		if f.test != "" && !strings.Contains(f.test, "/") {
			n++
		}
	}
	return n
}

// isPackageLine picks the package result lines worth showing live.
func isPackageLine(s string) bool {
	return strings.HasPrefix(s, "ok ") || strings.HasPrefix(s, "ok\t") ||
		strings.HasPrefix(s, "FAIL") || strings.HasPrefix(s, "panic:")
}

// errorLines picks the lines of a failing test that say why: t.Error and
// t.Fatal output (file_test.go:NN:), panics and timeouts. t.Log lines look
// the same, and errors tend to come last, so it keeps the last 8.
func errorLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		if t := strings.TrimSpace(l); isErrorLine(t) {
			out = append(out, t)
		}
	}
	return out[max(0, len(out)-8):]
}

func isErrorLine(t string) bool {
	if strings.HasPrefix(t, "panic:") || strings.HasPrefix(t, "fatal error:") ||
		strings.Contains(t, "test timed out") {
		return true
	}
	// "name_test.go:123: message" as printed by t.Errorf and t.Fatalf.
	i := strings.Index(t, "_test.go:")
	if i <= 0 || strings.ContainsAny(t[:i], " \t") {
		return false
	}
	rest := t[i+len("_test.go:"):]
	j := strings.IndexByte(rest, ':')
	if j <= 0 {
		return false
	}
	for _, c := range rest[:j] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(10 * time.Millisecond).String()
}
