package cli

import (
	"github.com/leasecron/leasecron/internal/config"
	"github.com/leasecron/leasecron/queue"
)

// extraHandlerKinds returns the built-in handler kinds that need more than
// configuration (storage access, say).
func (a *app) extraHandlerKinds() map[string]func(config.Handler) (queue.Handler, error) {
	return map[string]func(config.Handler) (queue.Handler, error){}
}
