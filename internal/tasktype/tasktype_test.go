package tasktype

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, ok := range []string{"mail", "report-daily", "report_daily", "2fa", "a", strings.Repeat("x", MaxLen)} {
		t.Run(ok, func(t *testing.T) {
			if err := Validate(ok); err != nil {
				t.Errorf("Validate(%q) = %v, want nil", ok, err)
			}
		})
	}
	for _, c := range []struct{ typ, want string }{
		// Schedulable before, but no handler could be configured for them.
		{"Report.Daily", `"Report.Daily"`},
		{"report.daily", "'.'"},
		{"Mail", `use "mail"`},
		{"", "1-64 letters"},
		{"-x", "starting with a letter or digit"},
		{"_x", "starting with a letter or digit"},
		{"send mail", `"send mail"`},
		{"a/b", `"a/b"`},
		{strings.Repeat("x", MaxLen+1), "1-64"},
	} {
		t.Run(c.typ, func(t *testing.T) {
			err := Validate(c.typ)
			var te *Error
			if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate(%q) = %v, want an *Error mentioning %q", c.typ, err, c.want)
			}
		})
	}
}
