// Package azurite starts a private Azurite (the local Azure Storage emulator)
// for tests and local runs: free ports on 127.0.0.1, a fresh data directory,
// the flags leasecron needs, readiness checks on all three services, and a
// clean stop.
//
// Azurite is an npm package pinned in the repository's package.json; `make
// deps` installs it with `npm ci`. Start finds it in node_modules/.bin of the
// repository (searching upward from the working directory), through
// LEASECRON_AZURITE_BIN, or on PATH.
//
// StartMemstore serves an in-memory account (the repository's
// internal/memstore) in Azurite's place, on loopback ports of this
// process; azuritetest uses it when LEASECRON_TEST_STORAGE=memstore.
package azurite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/osproc"
	"github.com/leasecron/leasecron/internal/storage"
)

// ErrNotInstalled is returned by Start when Node.js or the Azurite package
// cannot be found. Its message says which command fixes it.
var ErrNotInstalled = errors.New("azurite is not available")

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Dir is the data directory (--location). Empty means a fresh temporary
	// directory, removed by Stop.
	Dir string
	// BlobPort, QueuePort and TablePort fix the ports; 0 (the default) lets
	// the system pick free ones.
	BlobPort, QueuePort, TablePort int
	// Host is the listen address. Default 127.0.0.1.
	Host string
	// Bin is the azurite executable. Default: LEASECRON_AZURITE_BIN, else
	// node_modules/.bin/azurite in the nearest directory enclosing the working
	// directory or the running executable, else azurite on PATH.
	Bin string
	// Log receives Azurite's own output. Default: discarded.
	Log io.Writer
	// StartTimeout bounds the wait for all three services. Default 60 s.
	StartTimeout time.Duration
	// InMemory keeps data in memory only (--inMemoryPersistence).
	InMemory bool
}

// Server is a running Azurite, or an in-memory account serving in its
// place (StartMemstore).
type Server struct {
	opts    Options
	bin     string
	ownDir  bool
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	blob    int
	queue   int
	table   int
	stopped bool
	mem     *memstore.Server // StartMemstore's account, nil for Azurite
}

// StartMemstore serves a fresh in-memory storage account
// (internal/memstore: Azure's Blob, Queue and Table protocols, in this
// process) on three loopback ports, in place of Azurite: the Server's
// ConnectionString, Ports, Stop and Done work as they do for Azurite.
// Restart closes the listeners and opens them again on the same ports,
// keeping the data and the leases (Azurite forgets its leases); Kill
// closes the listeners, keeping the data, as a crash would; Pid is 0 and
// Dir "". It needs neither Node.js nor Azurite.
func StartMemstore() (*Server, error) {
	mem := memstore.New(memstore.Options{})
	if _, err := mem.Listen(); err != nil {
		return nil, fmt.Errorf("azurite: memstore: %w", err)
	}
	s := &Server{opts: Options{Host: "127.0.0.1", InMemory: true}, mem: mem, done: make(chan struct{})}
	s.blob, s.queue, s.table = mem.Ports()
	return s, nil
}

// IsMemstore reports whether the server is an in-memory account
// (StartMemstore) rather than Azurite.
func (s *Server) IsMemstore() bool { return s.mem != nil }

// closeMem closes the in-memory account's listeners and marks it done.
func (s *Server) closeMem() {
	_ = s.mem.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
}

// Start launches Azurite and returns once blob, queue and table all answer
// HTTP requests. The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	bin, err := FindBinary(opts.Bin)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, bin: bin, blob: opts.BlobPort, queue: opts.QueuePort, table: opts.TablePort}
	if s.opts.Dir == "" && !opts.InMemory {
		dir, err := os.MkdirTemp("", "leasecron-azurite-")
		if err != nil {
			return nil, fmt.Errorf("azurite: data directory: %w", err)
		}
		s.opts.Dir, s.ownDir = dir, true
	}
	if err := s.start(ctx); err != nil {
		if s.ownDir {
			os.RemoveAll(s.opts.Dir)
		}
		return nil, err
	}
	return s, nil
}

// binName is npm's launcher of the azurite package in node_modules/.bin:
// a shell script, or on Windows the azurite.cmd beside it.
func binName() string {
	if runtime.GOOS == "windows" {
		return "azurite.cmd"
	}
	return "azurite"
}

// FindBinary resolves the azurite executable as Start does, returning
// ErrNotInstalled (with the fixing command) when it is missing.
func FindBinary(explicit string) (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("%w: Node.js (node) is not on PATH; install Node.js 18 or later (for example `apt-get install -y nodejs npm`), then run `make deps`", ErrNotInstalled)
	}
	if explicit == "" {
		explicit = os.Getenv("LEASECRON_AZURITE_BIN")
	}
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", fmt.Errorf("%w: %s: %w; run `make deps` (npm ci) in the leasecron repository", ErrNotInstalled, explicit, err)
		}
		return explicit, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			p := filepath.Join(dir, "node_modules", ".bin", binName())
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if p, err := exec.LookPath("azurite"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: the azurite npm package is not installed; run `make deps` (npm ci) in the leasecron repository, or `npm install -g azurite@3.37.0`, or set LEASECRON_AZURITE_BIN", ErrNotInstalled)
}

var listenRE = regexp.MustCompile(`Azurite (Blob|Queue|Table) service is successfully listening at https?://[^:]+:(\d+)`)

func (s *Server) start(ctx context.Context) error {
	args := []string{
		"--skipApiVersionCheck", "--disableTelemetry",
		"--blobHost", s.opts.Host, "--blobPort", strconv.Itoa(s.blob),
		"--queueHost", s.opts.Host, "--queuePort", strconv.Itoa(s.queue),
		"--tableHost", s.opts.Host, "--tablePort", strconv.Itoa(s.table),
	}
	if s.opts.InMemory {
		args = append(args, "--inMemoryPersistence")
	} else {
		args = append(args, "--location", s.opts.Dir)
	}
	cmd := exec.Command(s.bin, args...)
	// In a process group of its own, so a stop reaches node and anything it
	// spawned, and (on Linux) killed with the process that started it, so an
	// interrupted test never leaves one running.
	osproc.Prepare(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("azurite: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("azurite: start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	ports := make(chan [2]string, 3)
	var tail tailBuffer
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			tail.add(line)
			if s.opts.Log != nil {
				fmt.Fprintln(s.opts.Log, line)
			}
			if m := listenRE.FindStringSubmatch(line); m != nil {
				ports <- [2]string{m[1], m[2]}
			}
		}
		io.Copy(io.Discard, out)
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.stopped = cmd, done, false
	s.mu.Unlock()

	fail := func(err error) error {
		s.kill()
		return fmt.Errorf("azurite: %w; last output:\n%s", err, tail.String())
	}
	deadline := time.NewTimer(s.opts.StartTimeout)
	defer deadline.Stop()
	for got := 0; got < 3; {
		select {
		case p := <-ports:
			n, _ := strconv.Atoi(p[1])
			switch p[0] {
			case "Blob":
				s.blob = n
			case "Queue":
				s.queue = n
			case "Table":
				s.table = n
			}
			got++
		case <-done:
			return fail(errors.New("exited during start-up"))
		case <-deadline.C:
			return fail(fmt.Errorf("services not listening after %s", s.opts.StartTimeout))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	client := &http.Client{Timeout: 2 * time.Second}
	for _, port := range []int{s.blob, s.queue, s.table} {
		u := fmt.Sprintf("http://%s/%s", net.JoinHostPort(s.opts.Host, strconv.Itoa(port)), storage.DevAccountName)
		for {
			resp, err := client.Get(u)
			if err == nil {
				resp.Body.Close()
				break
			}
			select {
			case <-done:
				return fail(errors.New("exited during start-up"))
			case <-deadline.C:
				return fail(fmt.Errorf("%s does not answer: %w", u, err))
			case <-ctx.Done():
				return fail(ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// ConnectionString returns a connection string for the emulator's
// well-known account with explicit endpoints on this server's ports.
func (s *Server) ConnectionString() string {
	return ConnectionString(s.opts.Host, s.blob, s.queue, s.table)
}

// ConnectionString builds an emulator connection string for the given host
// and ports.
func ConnectionString(host string, blob, queue, table int) string {
	ep := func(p int) string {
		return fmt.Sprintf("http://%s/%s", net.JoinHostPort(host, strconv.Itoa(p)), storage.DevAccountName)
	}
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s;QueueEndpoint=%s;TableEndpoint=%s;",
		storage.DevAccountName, storage.DevAccountKey, ep(blob), ep(queue), ep(table))
}

// Ports returns the blob, queue and table ports.
func (s *Server) Ports() (blob, queue, table int) { return s.blob, s.queue, s.table }

// Dir returns the data directory ("" when in memory).
func (s *Server) Dir() string { return s.opts.Dir }

// Pid returns the process id of the running Azurite, 0 before it started;
// benchmarks read its CPU time from it.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Done is closed when the Azurite process exits (an in-memory account's
// listeners close).
func (s *Server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// Kill ends Azurite at once with SIGKILL, like a crash. Data it had not yet
// flushed to disk is lost, and so are blob leases. The data directory is
// kept so Restart can bring it back.
func (s *Server) Kill() {
	s.kill()
}

func (s *Server) kill() {
	if s.mem != nil {
		s.closeMem()
		return
	}
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	osproc.Kill(cmd)
	<-done
}

// Restart stops Azurite (gracefully) and starts it again on the same ports
// with the same data directory.
func (s *Server) Restart(ctx context.Context) error {
	if s.mem != nil {
		s.closeMem()
		if _, err := s.mem.ListenPorts(s.blob, s.queue, s.table); err != nil {
			return fmt.Errorf("azurite: memstore: %w", err)
		}
		s.mu.Lock()
		s.done = make(chan struct{})
		s.mu.Unlock()
		return nil
	}
	s.terminate()
	return s.start(ctx)
}

func (s *Server) terminate() {
	if s.mem != nil {
		s.closeMem()
		return
	}
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	osproc.Terminate(cmd)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		osproc.Kill(cmd)
		<-done
	}
}

// Stop ends Azurite (SIGTERM, then SIGKILL after 10 s) and removes the data
// directory if Start created it. It is safe to call more than once.
func (s *Server) Stop() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()
	s.terminate()
	if s.ownDir {
		return os.RemoveAll(s.opts.Dir)
	}
	return nil
}

type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	if len(t.lines) > 20 {
		t.lines = t.lines[1:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b []byte
	for _, l := range t.lines {
		b = append(b, l...)
		b = append(b, '\n')
	}
	return string(b)
}
