package handler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/leasecron/leasecron/handler"
	"github.com/leasecron/leasecron/leasecrontype"
)

// An Exec handler runs a configured program; the payload arrives on stdin
// and the task's identity in LEASECRON_* variables.
func ExampleExec() {
	h, err := handler.Exec(handler.ExecOptions{
		Argv:    []string{"/bin/sh", "-c", `echo "task $LEASECRON_TASK_ID attempt $LEASECRON_ATTEMPT got: $(cat)"`},
		Timeout: 10 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The consumer gives every handler a context whose Output it keeps.
	ctx := leasecrontype.WithOutputWriter(context.Background(), os.Stdout)
	err = h(ctx, leasecrontype.Task{ID: "t1", Type: "greet", Payload: []byte("; rm -rf /"), Attempt: 1})
	fmt.Println("error:", err)
	// Output:
	// task t1 attempt 1 got: ; rm -rf /
	// error: <nil>
}

// A failing program's exit code and output travel in the error.
func ExampleExecError() {
	h, _ := handler.Exec(handler.ExecOptions{Argv: []string{"/bin/sh", "-c", "echo disk full >&2; exit 4"}})
	err := h(context.Background(), leasecrontype.Task{ID: "t2", Type: "backup"})
	fmt.Println(err)
	var ee *handler.ExecError
	if errors.As(err, &ee) {
		fmt.Printf("exit code %d, tail: %q\n", ee.ExitCode, ee.Tail)
	}
	// Output:
	// exec /bin/sh: exit code 4; output: disk full
	// exit code 4, tail: "disk full\n"
}

// An HTTP handler posts the payload; 2xx is success.
func ExampleHTTP() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s id=%s type=%s body=%s\n", r.Method, r.URL.Path,
			r.Header.Get(handler.HeaderTaskID), r.Header.Get(handler.HeaderTaskType), body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	h, err := handler.HTTP(handler.HTTPOptions{URL: srv.URL + "/hooks/report", Timeout: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = h(context.Background(), leasecrontype.Task{ID: "t3", Type: "report", Payload: []byte(`{"day":"monday"}`), Attempt: 1})
	fmt.Println("error:", err)
	// Output:
	// POST /hooks/report id=t3 type=report body={"day":"monday"}
	// error: <nil>
}

// Options are validated when the handler is built.
func ExampleExec_validation() {
	_, err := handler.Exec(handler.ExecOptions{Argv: []string{"./job.sh"}})
	fmt.Println(err)
	_, err = handler.HTTP(handler.HTTPOptions{URL: "ftp://example.com/"})
	fmt.Println(err)
	// Output:
	// invalid handler options: ExecOptions.Argv[0] "./job.sh" is a relative path: use an absolute path, or a bare program name found on PATH
	// invalid handler options: HTTPOptions.URL "ftp://example.com/" has scheme "ftp": want http or https
}
