package e2e

import (
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// Every worker process, Azurite and in-process client these tests start
// must be gone when they end.
func TestMain(m *testing.M) { azuritetest.Main(m) }
