package leasecron_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/trafficcop"
)

// Every component that names itself when no id is given uses the one
// format (there were three: host-pid-hex, host/pid/hex and host-pid-uuid8).
func TestEveryDefaultIdentityHasOneForm(t *testing.T) {
	form := regexp.MustCompile(`^[A-Za-z0-9._-]{1,40}-[0-9]+-[0-9a-f]{8}$`)
	cop, err := trafficcop.NewCop(trafficcop.NewMemoryLock("l", nil), trafficcop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	agg, err := blackboard.NewWorkerWithStore(blackboard.NewMemoryStore(), blackboard.Options{
		Handlers: func(string) (leasecrontype.Handler, bool) { return nil, false },
	})
	if err != nil {
		t.Fatal(err)
	}
	con, err := queue.NewConsumerWith(queue.NewMemoryQueue("w", nil), queue.NewMemoryQueue("p", nil), queue.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{
		"trafficcop.DefaultIdentity": trafficcop.DefaultIdentity(),
		"Cop.Identity":               cop.Identity(),
		"aggregator Worker.ID":       agg.ID(),
		"queue Consumer":             con.Stats().Instance,
	} {
		t.Run(fmt.Sprint(name), func(t *testing.T) {
			if !form.MatchString(id) {
				t.Errorf("%s = %q, want {host}-{pid}-{8 hex}", name, id)
			}
		})
	}
}
