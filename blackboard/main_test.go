package blackboard

import (
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }
