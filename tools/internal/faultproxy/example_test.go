package faultproxy_test

import (
	"fmt"
	"time"

	"github.com/leasecron/leasecron/tools/internal/faultproxy"
)

// A proxy in front of Azurite's table port: give a worker a connection
// string naming the proxy's port, then inject faults while it runs.
func Example() {
	p, err := faultproxy.New(faultproxy.Options{Target: "127.0.0.1:10002"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	_ = p.SetLatency(200 * time.Millisecond) // 200 ms each way
	_ = p.Set(faultproxy.Stall)              // a black hole: nothing forwarded
	_ = p.Set(faultproxy.Partition)          // connections refused
	_ = p.Set(faultproxy.Pass)               // healed, same address
	fmt.Println(p.Mode())
	// Output: pass
}
