package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/leasecron/leasecron/tools/internal/proc"
)

var dashboardURL = regexp.MustCompile(`dashboard: (http://[^\s/]+)/`)

// StartDashboard runs `leasecron dashboard --addr 127.0.0.1:0` against the
// fleet (extra args and env added) and returns its base URL once it
// listens. Stop stops it with the workers.
func (f *Fleet) StartDashboard(ctx context.Context, args []string, env ...string) (string, *proc.Process, error) {
	logPath := filepath.Join(f.Dir, "dashboard.log")
	p, err := proc.Start("dashboard", f.Bin, append([]string{"dashboard", "--addr", "127.0.0.1:0"}, args...), append(f.Env(), env...), logPath)
	if err != nil {
		return "", nil, err
	}
	f.mu.Lock()
	f.workers["dashboard"] = p
	f.mu.Unlock()
	for {
		b, _ := os.ReadFile(logPath)
		if m := dashboardURL.FindSubmatch(b); m != nil {
			return string(m[1]), p, nil
		}
		select {
		case <-p.Done():
			return "", p, fmt.Errorf("leasecron dashboard exited: %w\n%s", p.Err(), b)
		case <-ctx.Done():
			return "", p, fmt.Errorf("leasecron dashboard did not listen: %w\n%s", ctx.Err(), b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
