package leasecron

import (
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/storage"
)

// ContainerClient returns a client of the named blob container in the
// account s describes, authenticated the same way: what
// calendar.NewBlobWriter and trafficcop.NewBlobLock take. It does not
// contact the service.
func (s Storage) ContainerClient(name string) (*container.Client, error) {
	if err := storage.ValidateContainerName(name); err != nil {
		return nil, fmt.Errorf("container %q: %w", name, err)
	}
	sc, err := storage.New(s.config(nil))
	if err != nil {
		return nil, err
	}
	return sc.Blob.NewContainerClient(name), nil
}
