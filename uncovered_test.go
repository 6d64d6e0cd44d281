package leasecron_test

import (
	"strings"
	"testing"

	"github.com/leasecron/leasecron"
)

// Uncovered names what no other running instance does once one stops:
// leading, walking the blackboard, consuming each of its queues. An
// instance of an earlier release, which does not say, is taken to do
// everything on the default queue; a draining one does nothing.
func TestUncoveredSaysWhatADrainLeavesUndone(t *testing.T) {
	all := []string{leasecron.RoleLead, leasecron.RoleConsume, leasecron.RoleBlackboard}
	cases := []struct {
		name   string
		others []leasecron.Instance
		want   []string
	}{
		{"alone", nil, []string{"can lead", "walks the blackboard", "consumes the queue default", "consumes the queue gpu"}},
		{"a consumer of both beside it", []leasecron.Instance{{ID: "b", Present: true, Roles: []string{leasecron.RoleConsume}, Queues: []string{"default", "gpu"}}},
			[]string{"can lead", "walks the blackboard"}},
		{"an earlier release beside it", []leasecron.Instance{{ID: "b", Present: true}}, []string{"consumes the queue gpu"}},
		{"a draining twin", []leasecron.Instance{{ID: "b", Present: true, Draining: true, Roles: all, Queues: []string{"default", "gpu"}}},
			[]string{"can lead", "walks the blackboard", "consumes the queue default", "consumes the queue gpu"}},
		{"a gone twin", []leasecron.Instance{{ID: "b", Roles: all, Queues: []string{"default", "gpu"}}},
			[]string{"can lead", "walks the blackboard", "consumes the queue default", "consumes the queue gpu"}},
		{"a full twin", []leasecron.Instance{{ID: "b", Present: true, Roles: all, Queues: []string{"default", "gpu"}}}, nil},
	}
	for _, c := range cases {
		ins := append([]leasecron.Instance{{ID: "a", Present: true, Roles: all, Queues: []string{"default", "gpu"}}}, c.others...)
		got := leasecron.Uncovered(ins, "a")
		if len(got) != len(c.want) {
			t.Errorf("%s: %q; want %d warnings (%q)", c.name, got, len(c.want), c.want)
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: warning %d is %q; want it to say %q", c.name, i, got[i], w)
			}
		}
	}
	if got := leasecron.Uncovered([]leasecron.Instance{{ID: "b", Present: true}}, "a"); got != nil {
		t.Errorf("an instance not listed: %q; want nothing", got)
	}
}
