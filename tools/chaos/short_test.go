//go:build !chaos

package chaos

import (
	"testing"
	"time"
)

// Short versions of scenarios 1, 2 and 5 for `make test-long`: the same code as
// the long ones with smaller sizes, run in parallel.

func TestShortLeaderKill(t *testing.T) {
	t.Parallel()
	runLeaderKill(t, "1 leader SIGKILL under backlog (short)", true, leaderKillParams{workers: 3, rounds: 2, rows: 300, api: 30})
}

func TestShortWorkerKill(t *testing.T) {
	t.Parallel()
	runWorkerKill(t, "2 worker SIGKILL mid-task (short)", true, workerKillParams{workers: 3, rec: 200, slow: 40, window: 12 * time.Second, kills: 2, every: 3 * time.Second})
}

func TestShortSigterm(t *testing.T) {
	t.Parallel()
	runSigterm(t, "5 leader SIGTERM (short)", true, sigtermParams{workers: 3, rec: 150, slow: 40, window: 15 * time.Second, rounds: 2})
}
