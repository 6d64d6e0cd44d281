package calendar

import (
	"embed"
	"io/fs"
)

//go:embed testdata/*.ics
var fixtures embed.FS

// Cities are the sample feeds shipped with the package, named after the
// elmcity hubs: westlafcals (West Lafayette, IN), networksierra (Sonora,
// CA), localist (Baltimore, MD) and aroundfred (Fredericksburg, VA). They
// share events (the same UID in several feeds), hold recurring events with
// overridden instances and use several time zones.
var Cities = []string{"westlafcals", "networksierra", "localist", "aroundfred"}

// Fixtures returns the sample feeds as a file system: {city}.ics for each
// of Cities, plus malformed.ics (an unbalanced component) and empty.ics
// (zero bytes). The demo serves it with http.FileServerFS.
func Fixtures() fs.FS {
	sub, err := fs.Sub(fixtures, "testdata")
	if err != nil {
		panic(err) // the embedded tree always has testdata
	}
	return sub
}
