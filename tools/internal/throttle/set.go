package throttle

import (
	"errors"
	"net"
	"strconv"

	"github.com/leasecron/leasecron/azurite"
)

// Set is a proxy per service of one Azurite (blob, queue, table), switched
// together.
type Set [3]*Proxy

// NewSet starts a proxy in front of each of the services at blob, queue
// and table (ports on 127.0.0.1), with o's RetryAfter, Seed and Logger.
func NewSet(blob, queue, table int, o Options) (Set, error) {
	var s Set
	for i, sv := range []struct {
		svc  Service
		port int
	}{{Blob, blob}, {Queue, queue}, {Table, table}} {
		po := o
		po.Target, po.Service = net.JoinHostPort("127.0.0.1", strconv.Itoa(sv.port)), sv.svc
		if o.Seed != 0 {
			po.Seed = o.Seed + uint64(i)
		}
		p, err := New(po)
		if err != nil {
			s.Close()
			return Set{}, err
		}
		s[i] = p
	}
	return s, nil
}

// ConnectionString names the three proxies as the account's endpoints.
func (s Set) ConnectionString() string {
	return azurite.ConnectionString("127.0.0.1", s[0].Port(), s[1].Port(), s[2].Port())
}

// SetRefuse is Proxy.SetRefuse on each.
func (s Set) SetRefuse(frac float64) error {
	var errs []error
	for _, p := range s {
		errs = append(errs, p.SetRefuse(frac))
	}
	return errors.Join(errs...)
}

// RefuseAll is Proxy.RefuseAll on each.
func (s Set) RefuseAll(on bool) {
	for _, p := range s {
		p.RefuseAll(on)
	}
}

// SetLimits is Proxy.SetLimits on each.
func (s Set) SetLimits(l Limits) error {
	var errs []error
	for _, p := range s {
		errs = append(errs, p.SetLimits(l))
	}
	return errors.Join(errs...)
}

// Stats sums the three proxies' counts.
func (s Set) Stats() Stats {
	var t Stats
	for _, p := range s {
		if p == nil {
			continue
		}
		x := p.Stats()
		t.Requests += x.Requests
		t.Forwarded += x.Forwarded
		t.Refused += x.Refused
		t.Random += x.Random
		t.All += x.All
		t.QueueLimit += x.QueueLimit
		t.PartitionLimit += x.PartitionLimit
		t.BlobLimit += x.BlobLimit
		t.AccountLimit += x.AccountLimit
	}
	return t
}

// Close closes each proxy.
func (s Set) Close() {
	for _, p := range s {
		if p != nil {
			_ = p.Close()
		}
	}
}

// Buckets is Proxy.Buckets of the three, merged (their keys differ).
func (s Set) Buckets() map[string]BucketStats {
	out := map[string]BucketStats{}
	for _, p := range s {
		for k, v := range p.Buckets() {
			out[k] = v
		}
	}
	return out
}
