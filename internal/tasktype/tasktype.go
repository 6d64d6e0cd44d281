// Package tasktype holds the one rule for task type names, shared by
// scheduling (schedule.ValidateType, the mover's check of stored rows), the
// worker's handler registry, the blackboard, pauses and the configuration
// (handlers.<type>, limits.<type>).
//
// The rule is what every place a type is written can express: 1–64
// characters, lower-case letters, digits, '_' and '-', starting with a
// letter or digit. Configuration keys are case-insensitive and split on
// '.', and environment variables (LEASECRON_HANDLERS_<TYPE>_EXEC) are
// upper-case by convention and cannot hold '.', so a type with an
// upper-case letter or a dot could be scheduled but never given a handler
// in the configuration.
package tasktype

import (
	"fmt"
	"regexp"
	"strings"
)

// MaxLen is the longest type name.
const MaxLen = 64

var re = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Validate returns nil if typ is a valid task type, or an error that quotes
// typ, states the rule and, when typ only breaks it by its case, names the
// type to use instead.
func Validate(typ string) error {
	if re.MatchString(typ) {
		return nil
	}
	msg := fmt.Sprintf("task type %q: want 1-%d letters, digits, '_' or '-', starting with a letter or digit; letters lower-case (configuration keys and environment variables do not keep case, and cannot hold '.')", typ, MaxLen)
	if lower := strings.ToLower(typ); lower != typ && re.MatchString(lower) {
		msg += fmt.Sprintf(": use %q", lower)
	}
	return &Error{msg}
}

// Error is a task type that breaks the rule.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }
