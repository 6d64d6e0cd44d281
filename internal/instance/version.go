package instance

import "runtime/debug"

// modulePath is the library's module path.
const modulePath = "github.com/leasecron/leasecron"

// Version returns the version of leasecron this process runs, from its
// build information: the module version when leasecron is the main module
// or a dependency ("v1.2.0", or a pseudo-version), else for a development
// build the VCS revision ("rev 1a2b3c4d", with "+dirty" for uncommitted
// changes); "devel" when the build recorded neither.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	v := ""
	if bi.Main.Path == modulePath {
		v = bi.Main.Version
	} else {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				v = d.Version
				if d.Replace != nil && d.Replace.Version != "" {
					v = d.Replace.Version
				}
			}
		}
	}
	if v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return "rev " + rev[:min(8, len(rev))] + dirty
}
