// Package opt holds the one rule every leasecron options struct follows for
// numbers and durations — a zero value means the documented default, a
// negative one is refused — and the one form of the error that refuses a
// value: "{kind}: {field} = {value}: want {what is accepted}".
package opt

import "fmt"

// Number is what Default and DefaultIn fill: ints and durations.
type Number interface{ ~int | ~int32 | ~int64 }

// Invalid returns the error refusing value for field, wrapping kind (the
// package's sentinel, such as queue.ErrInvalidOptions) so callers can test
// it with errors.Is.
func Invalid(kind error, field string, value any, want string) error {
	return fmt.Errorf("%w: %s = %v: want %s", kind, field, value, want)
}

// Default sets *v to def when it is zero, and refuses a negative *v.
func Default[T Number](kind error, field string, v *T, def T) error {
	switch {
	case *v < 0:
		return Invalid(kind, field, *v, fmt.Sprintf("a positive value, or 0 for the default %v", def))
	case *v == 0:
		*v = def
	}
	return nil
}

// DefaultIn is Default for a value that must also lie in [lo, hi].
func DefaultIn[T Number](kind error, field string, v *T, def, lo, hi T) error {
	if *v == 0 {
		*v = def
	}
	if *v < lo || *v > hi {
		return Invalid(kind, field, *v, fmt.Sprintf("%v to %v, or 0 for the default %v", lo, hi, def))
	}
	return nil
}

// DefaultAtLeast is Default for a value that must also be at least lo.
func DefaultAtLeast[T Number](kind error, field string, v *T, def, lo T) error {
	if *v == 0 {
		*v = def
	}
	if *v < lo {
		return Invalid(kind, field, *v, fmt.Sprintf("at least %v, or 0 for the default %v", lo, def))
	}
	return nil
}
