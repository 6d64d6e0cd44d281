// Package opt holds the one rule every leasecron options struct follows for
// numbers and durations, and the one form of the error that refuses a
// value: "{kind}: {field} = {value}: want {what is accepted}".
//
// The rule: an options type settles its defaults in one method,
// WithDefaults, which replaces each zero field by its default (cmp.Or) and
// touches nothing else; then validate refuses, wrapping the package's
// ErrInvalidOptions, every value outside its range. Zero always means the
// documented default. A negative value is refused, except in a field whose
// documentation says that a negative value turns its feature off
// (schedule.MoverSettings.Early and SweepEvery, leasecron.RunsOptions
// CleanEvery); WithDefaults leaves such a value as it is and the package
// reads it as "off".
package opt

import "fmt"

// Number is what the checks take: ints and durations.
type Number interface{ ~int | ~int32 | ~int64 }

// Invalid returns the error refusing value for field, wrapping kind (the
// package's sentinel, such as queue.ErrInvalidOptions) so callers can test
// it with errors.Is.
func Invalid(kind error, field string, value any, want string) error {
	return fmt.Errorf("%w: %s = %v: want %s", kind, field, value, want)
}

// Positive refuses a v that is not positive; def is the default a zero
// would have taken (for the message).
func Positive[T Number](kind error, field string, v, def T) error {
	if v <= 0 {
		return Invalid(kind, field, v, fmt.Sprintf("a positive value, or 0 for the default %v", def))
	}
	return nil
}

// In refuses a v outside [lo, hi].
func In[T Number](kind error, field string, v, def, lo, hi T) error {
	if v < lo || v > hi {
		return Invalid(kind, field, v, fmt.Sprintf("%v to %v, or 0 for the default %v", lo, hi, def))
	}
	return nil
}

// AtLeast refuses a v below lo.
func AtLeast[T Number](kind error, field string, v, def, lo T) error {
	if v < lo {
		return Invalid(kind, field, v, fmt.Sprintf("at least %v, or 0 for the default %v", lo, def))
	}
	return nil
}

// First returns the first non-nil error: validate methods list their
// checks in field order and report the first field that is wrong.
func First(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
