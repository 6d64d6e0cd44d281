package leasecron_test

import (
	"errors"
	"testing"

	"github.com/leasecron/leasecron"
)

// A token limited to a type no task can have would touch nothing: the
// API, the dashboard and the CLI all create tokens through this check.
func TestValidateTokenRefusesTypesNoTaskCanHave(t *testing.T) {
	for _, types := range [][]string{{"Mail"}, {"mail", "a b"}, {""}, {"x.y"}} {
		if err := leasecron.ValidateToken("ci", "viewer", types); !errors.Is(err, leasecron.ErrInvalidToken) {
			t.Errorf("ValidateToken with types %q: %v, want ErrInvalidToken", types, err)
		}
	}
	if err := leasecron.ValidateToken("ci", "viewer", []string{"mail", "resize-image"}); err != nil {
		t.Errorf("ValidateToken with valid types: %v", err)
	}
}
