// Package proc builds the leasecron binary and runs worker processes for
// multi-process tests, the reliability suite, benchmarks and the demo.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/osproc"
)

// ModuleRoot returns the directory of leasecron's go.mod: the library
// module, also when called from a nested module (tools/, examples/,
// cmd/leasecron/).
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the leasecron module")
	}
	for dir := filepath.Dir(mod); ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && libraryModule.Match(b) {
			return dir, nil
		}
		if parent := filepath.Dir(dir); parent == dir {
			return "", fmt.Errorf("no go.mod of %s above %s", libraryPath, filepath.Dir(mod))
		}
	}
}

const libraryPath = "github.com/leasecron/leasecron"

var libraryModule = regexp.MustCompile(`(?m)^module\s+` + regexp.QuoteMeta(libraryPath) + `\s*$`)

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// Binary builds the command (cmd/leasecron, a module of its own) once per
// process into a temporary directory and returns its path. LEASECRON_BIN,
// when set, is used instead.
func Binary() (string, error) {
	if p := os.Getenv("LEASECRON_BIN"); p != "" {
		return p, nil
	}
	buildOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "leasecron-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "leasecron")
		cmd := exec.Command("go", "build", "-o", buildBin, ".")
		cmd.Dir = filepath.Join(root, "cmd", "leasecron")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build in cmd/leasecron: %w\n%s", err, out)
		}
	})
	return buildBin, buildErr
}

// PreviousRelease is the commit of the release before sharding, whose
// binary the upgrade tests run next to this one's; LEASECRON_PREVIOUS, when
// set, names another commit (PreviousBinary).
const PreviousRelease = "9beddab"

// PreviousBinary builds the previous release's binary (PreviousRelease, or
// the commit LEASECRON_PREVIOUS names) into dir and returns its path and
// commit.
func PreviousBinary(dir string) (bin, commit string, err error) {
	commit = PreviousRelease
	if c := os.Getenv("LEASECRON_PREVIOUS"); c != "" {
		commit = c
	}
	bin, err = BinaryAt(commit, dir)
	return bin, commit, err
}

// BinaryAt builds the leasecron binary of an earlier commit of this
// repository (for upgrade tests) into dir: it checks the commit out in a
// temporary git worktree, builds cmd/leasecron there and removes the
// worktree. It needs the repository's history (not a shallow clone
// without the commit).
func BinaryAt(commit, dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	wt, err := os.MkdirTemp("", "leasecron-at-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(wt)
	src := filepath.Join(wt, "src")
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", src, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git worktree add %s: %w\n%s", commit, err, out)
	}
	defer func() { _ = exec.Command("git", "-C", root, "worktree", "remove", "--force", src).Run() }()
	bin := filepath.Join(dir, "leasecron-"+commit)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(src, "cmd", "leasecron")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build of %s: %w\n%s", commit, err, out)
	}
	return bin, nil
}

// Process is a running leasecron process.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
	err  error
}

// Start runs bin with args and env (added to the current environment),
// writing its combined output to logPath.
func Start(name, bin string, args, env []string, logPath string) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	osproc.Prepare(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process alone (not its group). Where the
// platform cannot deliver sig (Windows: anything but os.Kill), nothing
// happens.
func (p *Process) Signal(sig os.Signal) { _ = p.cmd.Process.Signal(sig) }

// Kill kills the process group at once (see internal/osproc) and waits for
// the exit.
func (p *Process) Kill() {
	osproc.Kill(p.cmd)
	<-p.done
}

// Stop asks the process group to stop (SIGTERM; see internal/osproc) and
// waits up to grace, then kills it.
func (p *Process) Stop(grace time.Duration) error {
	osproc.Terminate(p.cmd)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s", p.Name, grace)
	}
}

// Done is closed when the process exits.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the exit error, valid after Done.
func (p *Process) Err() error { return p.err }

// Run runs bin with args to completion and returns stdout, stderr and the error.
func Run(ctx context.Context, bin string, env []string, stdin io.Reader, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}
