// Package queuesrv serves an in-memory Azure Queue service on a loopback
// port, for long runs that need queues of 100,000 messages: the Queue
// service of the library's internal/memstore (create, delete and list
// queues, properties, put, get, peek, update, delete and clear messages),
// on a listener of its own.
//
// Azurite keeps a queue's messages in one collection that each get and
// delete scans: on this machine a delete takes 65 ms at 10,000 messages
// and 300 ms at 30,000, so draining a queue of 100,000 would take most of
// a day, while Azure serves the same operations in constant time.
// memstore keeps each queue's messages in a map and a heap ordered by when
// they become visible, so every operation costs O(log n), and tables and
// blobs stay on Azurite (point a connection string's QueueEndpoint at
// it). It follows the service's rules where leasecron depends on them: a
// get hides each message for its visibility timeout and hands out a new
// pop receipt, update and delete need the latest receipt (400
// PopReceiptMismatch otherwise, 404 MessageNotFound once the message is
// gone), a message of time-to-live -1 never expires, and a body over
// 64 KiB is refused. It does not check signatures, and keeps nothing when
// it stops.
package queuesrv

import (
	"fmt"
	"net"
	"time"

	"github.com/leasecron/leasecron/internal/memstore"
)

// MaxMessageBytes is the largest message text the service accepts.
const MaxMessageBytes = memstore.MaxMessageBytes

// Server is a running in-memory queue service.
type Server struct {
	mem *memstore.Server
	ln  net.Listener
}

// Op names an operation the server counts.
type Op int

// The operations Calls counts.
const (
	OpPut Op = iota
	OpGet
	OpPeek
	OpUpdate
	OpDelete
	OpOther
)

// opNames are memstore's names of the operations counted on their own.
var opNames = map[Op]string{
	OpPut: "PutMessage", OpGet: "GetMessages", OpPeek: "PeekMessages",
	OpUpdate: "UpdateMessage", OpDelete: "DeleteMessage",
}

// Start listens on a free port of 127.0.0.1 and serves.
func Start() (*Server, error) { return StartWithClock(time.Now) }

// StartWithClock is Start with the clock that visibility and expiry are
// counted on.
func StartWithClock(now func() time.Time) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("queuesrv: listen: %w", err)
	}
	mem := memstore.New(memstore.Options{Now: now})
	mem.ServeListener(ln, mem.QueueHandler())
	return &Server{mem: mem, ln: ln}, nil
}

// Port is the port the server listens on.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Close stops the server; every message is gone.
func (s *Server) Close() error { return s.mem.Close() }

// Calls returns how many requests of op the server has answered.
func (s *Server) Calls(op Op) int64 {
	counts := s.mem.Requests()
	if name, ok := opNames[op]; ok {
		return counts[name]
	}
	if op != OpOther {
		return 0
	}
	var n int64
	for name, c := range counts {
		n += c
		for _, own := range opNames {
			if name == own {
				n -= c
			}
		}
	}
	return n
}

// Len returns how many messages queue holds (hidden ones included), or
// -1 when there is no such queue.
func (s *Server) Len(name string) int { return s.mem.QueueLen(name) }
