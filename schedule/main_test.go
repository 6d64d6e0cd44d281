package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// ctx returns a context bounded for one test.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}
