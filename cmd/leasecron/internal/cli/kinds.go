package cli

import (
	"github.com/leasecron/leasecron/blackboard/calendar"
	"github.com/leasecron/leasecron/cmd/leasecron/internal/config"
	"github.com/leasecron/leasecron/leasecrontype"
)

// extraHandlerKinds returns the built-in handler kinds that need more than
// their own configuration (storage access, say).
func (a *app) extraHandlerKinds() map[string]func(config.Handler) (leasecrontype.Handler, error) {
	return map[string]func(config.Handler) (leasecrontype.Handler, error){
		"calendar": func(h config.Handler) (leasecrontype.Handler, error) {
			cc, err := a.cfg.Storage.ContainerClient(a.cfg.Names.Container)
			if err != nil {
				return nil, err
			}
			blobs, err := calendar.NewBlobWriter(cc)
			if err != nil {
				return nil, err
			}
			return calendar.New(calendar.Options{Blobs: blobs, Timeout: h.Timeout, Logger: a.log})
		},
	}
}
