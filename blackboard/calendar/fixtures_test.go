package calendar

import (
	"embed"
	"io/fs"
)

//go:embed testdata/*.ics
var fixtureFS embed.FS

// cities are the sample feeds in testdata, named after the
// elmcity hubs: westlafcals (West Lafayette, IN), networksierra (Sonora,
// CA), localist (Baltimore, MD) and aroundfred (Fredericksburg, VA). They
// share events (the same UID in several feeds), hold recurring events with
// overridden instances and use several time zones.
var cities = []string{"westlafcals", "networksierra", "localist", "aroundfred"}

// fixtures returns the sample feeds as a file system: {city}.ics for each
// of cities, plus malformed.ics (an unbalanced component) and empty.ics
// (zero bytes). The demo serves the same directory.
func fixtures() fs.FS {
	sub, err := fs.Sub(fixtureFS, "testdata")
	if err != nil {
		panic(err) // the embedded tree always has testdata
	}
	return sub
}
