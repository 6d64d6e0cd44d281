//go:build !chaos

package chaos

// fullSuite: without the chaos tag only the short scenarios run (make
// test) and their results go to a temporary file, not to the docs.
const fullSuite = false
