package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

// maxCacheEntries bounds the cache; beyond it, expired entries go, and if
// none has expired, everything does.
const maxCacheEntries = 256

// fetchTimeout bounds one shared read: it runs detached from the request
// that started it, since other viewers may be waiting for it too.
const fetchTimeout = 20 * time.Second

// cache shares reads between viewers: one fetch per key per TTL, and
// concurrent requests for a key being fetched wait for that fetch.
type cache struct {
	clk clock.Clock
	ttl time.Duration

	mu sync.Mutex
	m  map[string]*cacheEntry
}

type cacheEntry struct {
	done chan struct{}
	at   time.Time
	val  any
	err  error
}

func newCache(clk clock.Clock, ttl time.Duration) *cache {
	return &cache{clk: clk, ttl: ttl, m: map[string]*cacheEntry{}}
}

// get returns the value for key, fetching it when there is none younger
// than the TTL. Errors are not cached beyond the fetch that returned them.
func (c *cache) get(ctx context.Context, key string, fetch func(ctx context.Context) (any, error)) (any, error) {
	c.mu.Lock()
	e := c.m[key]
	if e != nil {
		select {
		case <-e.done:
			if e.err == nil && c.clk.Now().Sub(e.at) < c.ttl {
				c.mu.Unlock()
				return e.val, nil
			}
			e = nil
		default: // being fetched: wait below
		}
	}
	if e == nil {
		e = &cacheEntry{done: make(chan struct{})}
		c.evictLocked()
		c.m[key] = e
		c.mu.Unlock()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		e.val, e.err = fetch(fctx)
		cancel()
		e.at = c.clk.Now()
		close(e.done)
		if e.err != nil {
			c.mu.Lock()
			if c.m[key] == e {
				delete(c.m, key)
			}
			c.mu.Unlock()
		}
		return e.val, e.err
	}
	c.mu.Unlock()
	select {
	case <-e.done:
		return e.val, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *cache) evictLocked() {
	if len(c.m) < maxCacheEntries {
		return
	}
	now := c.clk.Now()
	for k, e := range c.m {
		select {
		case <-e.done:
			if now.Sub(e.at) >= c.ttl {
				delete(c.m, k)
			}
		default:
		}
	}
	if len(c.m) >= maxCacheEntries {
		clear(c.m)
	}
}

// clear forgets everything (after an action, so its effect shows at once).
func (c *cache) clear() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}
