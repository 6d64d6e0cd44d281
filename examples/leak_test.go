package examples_test

import (
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// The example programs and the Azurite they run against must be gone when
// the tests end.
func TestMain(m *testing.M) { azuritetest.Main(m) }
