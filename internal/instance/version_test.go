package instance

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"main module, tagged", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v1.4.0"}}, "v1.4.0"},
		{"dependency", debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"}, Deps: []*debug.Module{{Path: "other/mod", Version: "v9.9.9"}, {Path: modulePath, Version: "v0.3.1"}}}, "v0.3.1"},
		{"dependency replaced by a version", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}, Deps: []*debug.Module{{Path: modulePath, Version: "v0.3.1", Replace: &debug.Module{Path: "fork/leasecron", Version: "v0.3.2"}}}}, "v0.3.2"},
		{"development build", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "70fe4ad0123456789"}, {Key: "vcs.modified", Value: "true"}}}, "rev 70fe4ad0+dirty"},
		{"replaced by a directory", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}, Deps: []*debug.Module{{Path: modulePath, Version: "v0.0.0", Replace: &debug.Module{Path: "../"}}}}, "v0.0.0"},
		{"nothing recorded", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, "devel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := versionOf(&c.bi); got != c.want {
				t.Errorf("%s: %q, want %q", c.name, got, c.want)
			}
		})
	}
}
