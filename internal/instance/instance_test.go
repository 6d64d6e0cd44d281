package instance

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var format = regexp.MustCompile(`^[A-Za-z0-9._-]{1,40}-[0-9]+-[0-9a-f]{8}$`)

func TestNewID(t *testing.T) {
	a, b := NewID(), NewID()
	if a == b {
		t.Fatalf("two ids alike: %q", a)
	}
	for _, s := range []string{a, b} {
		t.Run(s, func(t *testing.T) {
			if !format.MatchString(s) {
				t.Errorf("NewID() = %q, want {host}-{pid}-{8 hex}", s)
			}
			if !strings.Contains(s, "-"+strconv.Itoa(os.Getpid())+"-") {
				t.Errorf("NewID() = %q does not carry the pid %d", s, os.Getpid())
			}
		})
	}
}

func TestHostNamesAreMadeSafe(t *testing.T) {
	for host, want := range map[string]string{
		"":                       "host-7-",
		"web/01#a?b\\c":          "web_01_a_b_c-7-",
		"mäschine":               "m_schine-7-",
		strings.Repeat("h", 100): strings.Repeat("h", 40) + "-7-",
	} {
		t.Run(fmt.Sprint(host), func(t *testing.T) {
			got := id(host, 7)
			if !strings.HasPrefix(got, want) || !format.MatchString(got) {
				t.Errorf("id(%q) = %q, want prefix %q in the id format", host, got, want)
			}
		})
	}
}
