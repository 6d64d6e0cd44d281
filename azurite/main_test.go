package azurite_test

import (
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// The emulator's processes and their output readers must all end with
// the tests that started them.
func TestMain(m *testing.M) { azuritetest.Main(m) }
