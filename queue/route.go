package queue

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Priority levels. A task's priority says which of its queue's levels its
// message goes to; a worker asks the levels it consumes in order, highest
// (1) first (see Queues). Zero in an Envelope, a Route or a row means
// PriorityDefault.
const (
	PriorityCritical = 1
	PriorityHigh     = 2
	PriorityDefault  = 3
	PriorityLow      = 4
	// Levels is how many priority levels there are.
	Levels = 4
)

// DefaultRouteQueue is the named queue of a task that names none: the
// work queues every worker consumes unless configured otherwise.
const DefaultRouteQueue = "default"

// MaxRouteQueueLen is the longest named queue.
const MaxRouteQueueLen = 20

var (
	routeQueueRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,19}$`)
	levelRE      = regexp.MustCompile(`^p[0-9]+$`)
	laneRE       = regexp.MustCompile(`^k[0-9]+$`)
)

// Route is where a task's message goes: a named queue and a priority
// level within it. The zero Route is the default queue at the default
// priority, whose messages go where every release before named queues
// sent them.
type Route struct {
	// Queue is the named queue; "" means DefaultRouteQueue.
	Queue string
	// Priority is 1 (highest) to 4 (lowest); 0 means PriorityDefault.
	Priority int
	// Lane is the fairness lane within the queue and level: 0 for
	// messages without a fair key, else chosen by the key (see
	// ClientOptions.FairLanes).
	Lane int
}

// Norm returns r with its zero fields set to the defaults.
func (r Route) Norm() Route {
	if r.Queue == "" {
		r.Queue = DefaultRouteQueue
	}
	if r.Priority == 0 {
		r.Priority = PriorityDefault
	}
	return r
}

// String returns "queue/priority", and "/k{lane}" for a fairness lane
// (for logs and listings).
func (r Route) String() string {
	r = r.Norm()
	s := r.Queue + "/" + strconv.Itoa(r.Priority)
	if r.Lane > 0 {
		s += "/k" + strconv.Itoa(r.Lane)
	}
	return s
}

// ValidateRouteQueue checks a named queue: 1–20 lower-case letters and
// digits, starting with a letter, neither of the form p{digits} (those
// name priority levels in the queues' names) nor "poison". "" (the default queue) is
// accepted.
func ValidateRouteQueue(name string) error {
	switch {
	case name == "":
		return nil
	case !routeQueueRE.MatchString(name):
		return fmt.Errorf("queue name %q: want 1 to %d lower-case letters and digits, starting with a letter", name, MaxRouteQueueLen)
	case levelRE.MatchString(name) || laneRE.MatchString(name):
		return fmt.Errorf("queue name %q: names p1, p2, …, k1, k2, … are reserved for priority levels and fairness lanes", name)
	case name == "poison":
		return fmt.Errorf("queue name %q: reserved for the dead-letter queue", name)
	}
	return nil
}

// ValidatePriority checks a priority: 0 (the default) or 1 to 4.
func ValidatePriority(p int) error {
	if p < 0 || p > Levels {
		return fmt.Errorf("priority %d: want 1 (critical), 2 (high), 3 (default) or 4 (low)", p)
	}
	return nil
}

// Validate checks both fields of r.
func (r Route) Validate() error {
	if err := ValidateRouteQueue(r.Queue); err != nil {
		return err
	}
	if r.Lane < 0 || r.Lane > MaxFairLanes {
		return fmt.Errorf("fairness lane %d: want 0 to %d", r.Lane, MaxFairLanes)
	}
	return ValidatePriority(r.Priority)
}

// ParsePriority reads a priority as a number (1–4) or a level's name:
// critical, high, default (or normal), low. "" is 0: the default.
func ParsePriority(s string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return 0, nil
	case "critical", "1":
		return PriorityCritical, nil
	case "high", "2":
		return PriorityHigh, nil
	case "default", "normal", "3":
		return PriorityDefault, nil
	case "low", "4":
		return PriorityLow, nil
	}
	return 0, fmt.Errorf("priority %q: want 1 (critical), 2 (high), 3 (default) or 4 (low)", s)
}

// PriorityName returns a level's name: critical, high, default or low.
func PriorityName(p int) string {
	switch p {
	case PriorityCritical:
		return "critical"
	case PriorityHigh:
		return "high"
	case PriorityLow:
		return "low"
	}
	return "default"
}

// RouteBase returns the name of the first work queue of r in the family
// named after base (names.queue): base itself for the default route,
// base-{queue} for a named queue, and -p{n} appended for a priority other
// than the default. The throughput queues of a route (ClientOptions.Queues
// above 1) add -1, -2, … to it (QueueNames). A named queue never starts
// with a digit and is never p{digits}, so the names of two routes never
// meet.
func RouteBase(base string, r Route) string {
	r = r.Norm()
	name := base
	if r.Queue != DefaultRouteQueue {
		name += "-" + r.Queue
	}
	if r.Priority != PriorityDefault {
		name += "-p" + strconv.Itoa(r.Priority)
	}
	if r.Lane > 0 {
		name += "-k" + strconv.Itoa(r.Lane)
	}
	return name
}

// ParseRouteName reads a work queue's name back into its route and its
// index among the route's throughput queues (0 for the route's base); ok
// is false for a name that is not one of base's family.
func ParseRouteName(base, name string) (r Route, index int, ok bool) {
	if name == base {
		return Route{}.Norm(), 0, true
	}
	rest, found := strings.CutPrefix(name, base+"-")
	if !found || rest == "" {
		return Route{}, 0, false
	}
	parts := strings.Split(rest, "-")
	r = Route{}.Norm()
	if len(parts) > 0 && ValidateRouteQueue(parts[0]) == nil && routeQueueRE.MatchString(parts[0]) {
		r.Queue, parts = parts[0], parts[1:]
	}
	if len(parts) > 0 && levelRE.MatchString(parts[0]) {
		p, err := strconv.Atoi(parts[0][1:])
		if err != nil || p < 1 || p > Levels || p == PriorityDefault {
			return Route{}, 0, false
		}
		r.Priority, parts = p, parts[1:]
	}
	if len(parts) > 0 && laneRE.MatchString(parts[0]) {
		k, err := strconv.Atoi(parts[0][1:])
		if err != nil || k < 1 || k > MaxFairLanes || parts[0][1] == '0' {
			return Route{}, 0, false
		}
		r.Lane, parts = k, parts[1:]
	}
	switch len(parts) {
	case 0:
		return r, 0, true
	case 1:
		n, err := strconv.Atoi(parts[0])
		if err != nil || n < 1 || parts[0][0] == '0' {
			return Route{}, 0, false
		}
		return r, n, true
	}
	return Route{}, 0, false
}
