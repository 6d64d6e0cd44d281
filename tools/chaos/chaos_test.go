//go:build chaos

package chaos

import (
	"testing"
	"time"
)

// The long scenarios of `make chaos`. They run one after another (no
// t.Parallel) so that their timings are not distorted by each other.

func TestLeaderKill(t *testing.T) {
	runLeaderKill(t, "1 leader SIGKILL under backlog", false, leaderKillParams{workers: 3, rounds: 4, rows: 700, api: 50})
}

func TestWorkerKill(t *testing.T) {
	runWorkerKill(t, "2 worker SIGKILL mid-task", false, workerKillParams{workers: 4, rec: 2200, slow: 300, window: 40 * time.Second, kills: 6, every: 5 * time.Second})
}

func TestSigterm(t *testing.T) {
	runSigterm(t, "5 leader SIGTERM", false, sigtermParams{workers: 3, rec: 2000, slow: 200, window: 40 * time.Second, rounds: 4})
}
