//go:build chaos

package chaos

// fullSuite: built with -tags chaos (make chaos), the long scenarios run
// and the results regenerate docs/RELIABILITY.md.
const fullSuite = true
