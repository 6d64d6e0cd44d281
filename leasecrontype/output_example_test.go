package leasecrontype_test

import (
	"errors"
	"fmt"

	"github.com/leasecron/leasecron/leasecrontype"
)

// A handler that captured its output elsewhere returns it with its error.
func ExampleWithOutput() {
	err := leasecrontype.WithOutput(errors.New("exit status 2"), "cannot open input.csv")
	fmt.Println(err)
	fmt.Println(leasecrontype.OutputOf(err))
	// Output:
	// exit status 2
	// cannot open input.csv
}
