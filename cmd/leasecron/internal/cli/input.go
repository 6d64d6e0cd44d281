package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
)

// durationFlag is a duration flag that keeps the text it was given, so a
// refusal quotes the value as it was typed ("-1h", not "-1h0m0s"), and
// says what a duration looks like when it does not parse.
type durationFlag struct {
	d   time.Duration
	raw string
}

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want a duration such as 90s, 10m or 2h")
	}
	f.d, f.raw = d, s
	return nil
}

// since returns the time a --since flag of f reaches back to: zero when
// the flag was not given, and a usage error for a duration that is not
// positive (0s would read as the flag left out: every entry), naming what
// falls within it.
func (f *durationFlag) since(now time.Time, within string) (time.Time, error) {
	switch {
	case f.raw == "":
		return time.Time{}, nil
	case f.d <= 0:
		return time.Time{}, usagef("--since %q: want a positive duration (%s within it)", f.raw, within)
	}
	return now.Add(-f.d), nil
}

// String is the text given ("" when none: no default shown in --help).
func (f *durationFlag) String() string { return f.raw }

func (f *durationFlag) Type() string { return "duration" }

// flagError is a usage error naming the flag of the field a SpecError of
// the library names (unique_for: --unique-for; id_prefix: --id-prefix),
// when err is one (nil otherwise): the user gave the flag (a review's find). A payload
// has no flag.
func flagError(err error) error {
	var se *leasecron.SpecError
	if !errors.As(err, &se) || se.Field == "" || se.Field == "payload" {
		return nil
	}
	return usagef("--%s: %w", strings.ReplaceAll(se.Field, "_", "-"), se.Err)
}

// refuseEmpty refuses each flag of names that was given an empty value
// (--in "", --types ","): a variable a script left empty must not read as
// the flag left out — a task due now, a pause without end, a token for
// every type. The message names the flag and what it takes (its usage).
func refuseEmpty(c *cobra.Command, names ...string) error {
	for _, name := range names {
		fl := c.Flags().Lookup(name)
		if fl == nil || !fl.Changed {
			continue
		}
		text := fl.Value.String()
		empty := strings.TrimSpace(text) == ""
		if sv, ok := fl.Value.(interface{ GetSlice() []string }); ok { // --after, --types
			empty = true
			for _, s := range sv.GetSlice() {
				empty = empty && strings.TrimSpace(s) == ""
			}
			text = strings.Join(sv.GetSlice(), ",")
		}
		if empty {
			return usagef("--%s %q: empty; want %s, or leave --%s out", name, text, fl.Usage, name)
		}
	}
	return nil
}

// changed returns the first flag of names that was given, or "".
func changed(c *cobra.Command, names ...string) string {
	for _, name := range names {
		if c.Flags().Changed(name) {
			return name
		}
	}
	return ""
}

// needID refuses an empty or blank ID argument by name, before the
// library's terse "empty task id".
func needID(id string) error {
	if strings.TrimSpace(id) == "" {
		return usagef("task id %q: empty; want the id of a task (leasecron list and leasecron runs show them)", id)
	}
	return nil
}
