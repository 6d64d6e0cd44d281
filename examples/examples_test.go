// The examples' test: it starts a private Azurite through the public
// azurite packages, builds both programs and runs them against it the way
// a user would, and checks what they print.
package examples_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// build compiles ./name into a temporary directory and returns the binary.
func build(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "./"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./%s: %v\n%s", name, err, out)
	}
	return bin
}

func env(conn string) []string {
	return append(os.Environ(), "AZURE_STORAGE_CONNECTION_STRING="+conn)
}

func TestWorkerExample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the example against Azurite")
	}
	t.Parallel()
	srv := azuritetest.Start(t)
	bin := build(t, "worker")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-tasks", "3")
	cmd.Env = env(srv.ConnectionString())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("worker example ran in %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("worker example: %v\nstderr:\n%s", err, stderr.String())
	}

	scheduled := regexp.MustCompile(`(?m)^scheduled (\S+) due `).FindAllStringSubmatch(string(out), -1)
	if len(scheduled) != 3 {
		t.Fatalf("%d tasks scheduled, want 3", len(scheduled))
	}
	want := map[string]string{} // id -> greeting
	for i, m := range scheduled {
		want[m[1]] = "hello, " + []string{"Ada", "Grace", "Edsger"}[i]
	}
	handled := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^handled (\S+) attempt (\d+): (.*)$`).FindAllStringSubmatch(string(out), -1) {
		if want[m[1]] != m[3] {
			t.Errorf("handled %s with %q, want %q", m[1], m[3], want[m[1]])
		}
		handled[m[1]]++
	}
	for id, greeting := range want {
		if handled[id] < 1 {
			t.Errorf("task %s was never handled", id)
		}
		// The run record keeps the handler's output.
		if !strings.Contains(string(out), fmt.Sprintf("\n%s succeeded: %s\n", id, greeting)) {
			t.Errorf("no line %q", fmt.Sprintf("%s succeeded: %s", id, greeting))
		}
	}
	if !strings.HasSuffix(string(out), "all 3 tasks succeeded\n") {
		t.Errorf("the output does not end with the summary line")
	}
}

// leaderEvent is one line of a leader example's output.
type leaderEvent struct {
	at   time.Time
	id   string
	what string // competing, leading, working, stopped, exiting
	gen  int
}

var leaderLine = regexp.MustCompile(`^(\S+) (\S+) (competing|leading|working|stopped|exiting)(?: generation=(\d+))?`)

// leaders runs copies of the leader example and collects their lines.
type leaders struct {
	t      *testing.T
	bin    string
	conn   string
	mu     sync.Mutex
	events []leaderEvent
	procs  map[string]*leaderProc
}

// leaderProc is one running copy of the leader example.
type leaderProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited and its output is read
	err  error         // how it exited, once done is closed
}

// wait returns how the process exited, failing the test if it has not
// within 30 s.
func (p *leaderProc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s", p.cmd.Args[2])
		return nil
	}
}

func (l *leaders) start(id string) {
	l.t.Helper()
	cmd := exec.Command(l.bin, "-id", id, "-lease", "15s", "-poll", "1s", "-every", "500ms")
	cmd.Env = env(l.conn)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			m := leaderLine.FindStringSubmatch(sc.Text())
			if m == nil {
				l.t.Errorf("%s printed an unexpected line: %q", id, sc.Text())
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				l.t.Errorf("%s: bad time in %q: %v", id, sc.Text(), err)
				continue
			}
			gen, _ := strconv.Atoi(m[4])
			l.mu.Lock()
			l.events = append(l.events, leaderEvent{at: at, id: m[2], what: m[3], gen: gen})
			l.mu.Unlock()
		}
	}()
	p := &leaderProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		<-read
		p.err = cmd.Wait()
		if p.err != nil && stderr.Len() > 0 {
			p.err = fmt.Errorf("%w\nstderr:\n%s", p.err, stderr.String())
		}
	}()
	l.procs[id] = p
	l.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
}

// waitFor returns the first event that matches f, failing the test when
// none has arrived within the given time.
func (l *leaders) waitFor(within time.Duration, what string, f func(leaderEvent) bool) leaderEvent {
	l.t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		for _, e := range l.events {
			if f(e) {
				l.mu.Unlock()
				return e
			}
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			l.t.Fatalf("%s: not seen within %v; events:\n%s", what, within, l.dump())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *leaders) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, e := range l.events {
		fmt.Fprintf(&b, "  %s %s %s %d\n", e.at.Format("15:04:05.000"), e.id, e.what, e.gen)
	}
	return b.String()
}

func TestLeaderExample(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the example against Azurite")
	}
	t.Parallel()
	srv := azuritetest.Start(t)
	l := &leaders{t: t, bin: build(t, "leader"), conn: srv.ConnectionString(), procs: map[string]*leaderProc{}}
	ids := []string{"alpha", "bravo", "charlie"}
	for _, id := range ids {
		l.start(id)
	}
	for _, id := range ids {
		l.waitFor(30*time.Second, id+" competing", func(e leaderEvent) bool { return e.id == id && e.what == "competing" })
	}
	leads := func(gen int) func(leaderEvent) bool {
		return func(e leaderEvent) bool { return e.what == "leading" && e.gen == gen }
	}
	first := l.waitFor(30*time.Second, "a first leader", leads(1))
	// It works as leader while the others wait: a few steps, one renewal.
	l.waitFor(30*time.Second, "the first leader working", func(e leaderEvent) bool {
		return e.id == first.id && e.what == "working" && e.gen == 1 && e.at.Sub(first.at) > 6*time.Second
	})

	// Graceful handover: SIGTERM makes the leader stop its work, release
	// the lease and exit; a standby leads within its poll interval.
	stopped := time.Now()
	if err := l.procs[first.id].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	second := l.waitFor(15*time.Second, "a leader after a graceful stop", leads(2))
	t.Logf("graceful handover from %s to %s after %v", first.id, second.id, time.Since(stopped).Round(time.Millisecond))
	if err := l.procs[first.id].wait(t); err != nil {
		t.Errorf("%s after SIGTERM: %v", first.id, err)
	}
	if second.id == first.id {
		t.Fatalf("%s led again after it stopped", first.id)
	}

	// Crash: SIGKILL releases nothing; the last standby takes over once
	// the lease (15 s) has expired.
	l.waitFor(30*time.Second, "the second leader working", func(e leaderEvent) bool {
		return e.id == second.id && e.what == "working" && e.gen == 2
	})
	killed := time.Now()
	if err := l.procs[second.id].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	third := l.waitFor(45*time.Second, "a leader after a crash", leads(3))
	t.Logf("handover from crashed %s to %s after %v", second.id, third.id, time.Since(killed).Round(time.Millisecond))
	if third.id == first.id || third.id == second.id {
		t.Fatalf("generation 3 led by %s, want the remaining standby", third.id)
	}
	if err := l.procs[third.id].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := l.procs[third.id].wait(t); err != nil {
		t.Errorf("%s after SIGTERM: %v", third.id, err)
	}

	// One leader at a time, by the instances' own clocks (one machine):
	// each term's lines all come before the next term's "leading".
	events := l.dump()
	l.mu.Lock()
	defer l.mu.Unlock()
	last := map[int]time.Time{}  // generation -> its last line
	begin := map[int]time.Time{} // generation -> its "leading" line
	for _, e := range l.events {
		if e.gen == 0 {
			continue
		}
		if e.what == "leading" {
			begin[e.gen] = e.at
		}
		if e.at.After(last[e.gen]) {
			last[e.gen] = e.at
		}
	}
	for gen := 2; gen <= 3; gen++ {
		if !last[gen-1].Before(begin[gen]) {
			t.Errorf("generation %d's last line at %s is not before generation %d began at %s:\n%s",
				gen-1, last[gen-1].Format(time.RFC3339Nano), gen, begin[gen].Format(time.RFC3339Nano), events)
		}
	}
	for _, e := range l.events {
		if e.gen > 3 {
			t.Errorf("unexpected generation %d (%s): only three terms were expected", e.gen, e.id)
		}
	}
}
