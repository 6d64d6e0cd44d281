package opt

import (
	"errors"
	"testing"
	"time"
)

var errKind = errors.New("invalid test options")

func TestChecks(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string // "" = accepted
	}{
		{"positive accepted", Positive(errKind, "Options.Wait", time.Second, 5*time.Second), ""},
		{"positive refuses negative", Positive(errKind, "Options.Wait", -time.Second, 5*time.Second),
			"invalid test options: Options.Wait = -1s: want a positive value, or 0 for the default 5s"},
		{"positive refuses zero left over", Positive(errKind, "Options.N", 0, 3), "invalid test options: Options.N = 0: want a positive value, or 0 for the default 3"},
		{"in accepted", In(errKind, "Options.N", 8, 8, 1, 1024), ""},
		{"in refuses below", In(errKind, "Options.N", -1, 8, 1, 1024), "invalid test options: Options.N = -1: want 1 to 1024, or 0 for the default 8"},
		{"in refuses above", In(errKind, "Options.N", 1025, 8, 1, 1024), "invalid test options: Options.N = 1025: want 1 to 1024, or 0 for the default 8"},
		{"at least accepted", AtLeast(errKind, "Options.Cycle", time.Hour, time.Hour, 10*time.Millisecond), ""},
		{"at least refuses below", AtLeast(errKind, "Options.Cycle", time.Millisecond, time.Hour, 10*time.Millisecond),
			"invalid test options: Options.Cycle = 1ms: want at least 10ms, or 0 for the default 1h0m0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			switch {
			case c.want == "" && c.err != nil:
				t.Fatalf("refused: %v", c.err)
			case c.want != "" && (!errors.Is(c.err, errKind) || c.err.Error() != c.want):
				t.Fatalf("got %v, want %q", c.err, c.want)
			}
		})
	}
}

func TestFirst(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	if err := First(nil, a, b); err != a || First(nil, nil) != nil { //nolint:errorlint // identity is the point: the first error itself
		t.Fatal("First does not return the first error")
	}
}
