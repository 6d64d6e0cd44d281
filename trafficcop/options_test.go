package trafficcop

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/clock"
)

func TestOptionsDefaults(t *testing.T) {
	o := Options{}.WithDefaults()
	if err := o.validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	want := LeaseTiming{LeaseDuration: 60 * time.Second, RenewEvery: 20 * time.Second, RetryEvery: 2 * time.Second,
		SafetyMargin: 6 * time.Second, CallTimeout: 5 * time.Second}
	if o.LeaseTiming != want {
		t.Errorf("timing %+v, want %+v", o.LeaseTiming, want)
	}
	if o.PollEvery != 15*time.Second || o.Logger == nil {
		t.Errorf("defaults %+v", o)
	}
	if _, ok := o.Clock.(clock.Real); !ok {
		t.Errorf("clock %T", o.Clock)
	}
	if !regexp.MustCompile(`^.+-\d+-[0-9a-f]{8}$`).MatchString(o.Identity) {
		t.Errorf("identity %q, want host-pid-8 hex", o.Identity)
	}
	if a, b := DefaultIdentity(), DefaultIdentity(); a == b {
		t.Errorf("two default identities are both %q", a)
	}

	short := LeaseTiming{LeaseDuration: 15 * time.Second}.WithDefaults()
	want = LeaseTiming{LeaseDuration: 15 * time.Second, RenewEvery: 5 * time.Second, RetryEvery: 500 * time.Millisecond,
		SafetyMargin: 2 * time.Second, CallTimeout: 2500 * time.Millisecond}
	if short != want {
		t.Errorf("15s timing %+v, want %+v", short, want)
	}
	if err := short.validate(); err != nil {
		t.Errorf("15s defaults invalid: %v", err)
	}
	so := SemaphoreOptions{}.WithDefaults()
	if so.Prefix != "slots" || so.validate() != nil {
		t.Errorf("semaphore defaults %+v: %v", so, so.validate())
	}
}

func TestOptionsValidation(t *testing.T) {
	lt := func(f func(*LeaseTiming)) Options {
		o := Options{Timing: Timing{LeaseTiming: LeaseTiming{LeaseDuration: 15 * time.Second}}}
		f(&o.LeaseTiming)
		return o
	}
	cases := []struct {
		name  string
		opts  Options
		field string
	}{
		{"lease too short", lt(func(l *LeaseTiming) { l.LeaseDuration = 10 * time.Second }), "LeaseDuration"},
		{"lease too long", lt(func(l *LeaseTiming) { l.LeaseDuration = 61 * time.Second }), "LeaseDuration"},
		{"lease not whole seconds", lt(func(l *LeaseTiming) { l.LeaseDuration = 15500 * time.Millisecond }), "LeaseDuration"},
		{"negative lease", lt(func(l *LeaseTiming) { l.LeaseDuration = -time.Second }), "LeaseDuration"},
		{"margin as long as lease", lt(func(l *LeaseTiming) { l.SafetyMargin = 15 * time.Second }), "SafetyMargin"},
		{"negative margin", lt(func(l *LeaseTiming) { l.SafetyMargin = -time.Second }), "SafetyMargin"},
		{"renew after deadline", lt(func(l *LeaseTiming) { l.RenewEvery = 13 * time.Second }), "RenewEvery"},
		{"negative renew", lt(func(l *LeaseTiming) { l.RenewEvery = -time.Second }), "RenewEvery"},
		{"retry slower than renew", lt(func(l *LeaseTiming) { l.RetryEvery = 6 * time.Second }), "RetryEvery"},
		{"call outlasts deadline", lt(func(l *LeaseTiming) { l.CallTimeout = 9 * time.Second }), "CallTimeout"},
		{"negative call timeout", lt(func(l *LeaseTiming) { l.CallTimeout = -time.Second }), "CallTimeout"},
		{"poll too fast", Options{Timing: Timing{PollEvery: 10 * time.Millisecond}}, "PollEvery"},
		{"identity with newline", Options{Identity: "a\nb"}, "Identity"},
		{"identity too long", Options{Identity: strings.Repeat("x", 257)}, "Identity"},
		{"identity not ASCII", Options{Identity: "höst/1/abc"}, "Identity"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewCop(NewMemoryLock("x", nil), c.opts)
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("err %v, want ErrInvalidOptions", err)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q does not name %s", err, c.field)
			}
		})
	}
}

func TestSemaphoreValidation(t *testing.T) {
	locks := func(n int) []Lock {
		l := make([]Lock, n)
		for i := range l {
			l[i] = NewMemoryLock("s", nil)
		}
		return l
	}
	cases := []struct {
		name  string
		sem   string
		locks []Lock
		opts  SemaphoreOptions
		field string
	}{
		{"empty name", "", locks(1), SemaphoreOptions{}, "name"},
		{"slash in name", "a/b", locks(1), SemaphoreOptions{}, "name"},
		{"no slots", "x", nil, SemaphoreOptions{}, "n"},
		{"too many slots", "x", locks(MaxSlots + 1), SemaphoreOptions{}, "n"},
		{"bad timing", "x", locks(1), SemaphoreOptions{LeaseTiming: LeaseTiming{LeaseDuration: time.Minute, RenewEvery: time.Minute}}, "RenewEvery"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewSemaphoreWithLocks(c.sem, c.locks, c.opts)
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("err %v, want ErrInvalidOptions naming %s", err, c.field)
			}
		})
	}
	if _, err := NewSemaphore(nil, "x", 1, SemaphoreOptions{}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("nil clients: %v", err)
	}
}

func TestNewBlobLockValidation(t *testing.T) {
	cc := func(u string) *container.Client {
		c, err := container.NewClientWithNoCredential(u, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []struct {
		name   string
		client *container.Client
		blob   string
		want   string // in the error; "" means accepted
		str    string // String() when accepted
	}{
		{"azure URL", cc("https://acct.blob.core.windows.net/leasecron"), "locks/scheduler", "", "leasecron/locks/scheduler"},
		{"azurite URL", cc("http://127.0.0.1:10000/devstoreaccount1/jobs"), "locks/a", "", "jobs/locks/a"},
		{"compose host, trailing slash, SAS", cc("http://azurite:10000/devstoreaccount1/jobs/?sv=x&sig=y"), "l", "", "jobs/l"},
		{"nil client", nil, "locks/scheduler", "nil container client", ""},
		{"bad container", cc("https://acct.blob.core.windows.net/Bad_Name"), "locks/scheduler", `container name "Bad_Name"`, ""},
		{"no container", cc("https://acct.blob.core.windows.net/"), "locks/scheduler", "container name", ""},
		{"blob with leading space", cc("https://acct.blob.core.windows.net/leasecron"), " locks", `blob = " locks"`, ""},
		{"blob too long", cc("https://acct.blob.core.windows.net/leasecron"), strings.Repeat("b", 1025), "blob = ", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := NewBlobLock(c.client, c.blob)
			if c.want == "" {
				if err != nil || l.String() != c.str {
					t.Fatalf("NewBlobLock = %v, %v; want %s", l, err, c.str)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrInvalidOptions naming %s", err, c.want)
			}
		})
	}
}
