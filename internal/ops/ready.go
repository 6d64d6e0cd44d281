package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/storage"
)

// ReadyCheck returns a readiness function for Options.Ready: it returns nil
// when the storage account answers and every named table and queue exists.
// Each call costs one cheap request per resource (a one-row table query,
// a queue GetProperties); with no names at all it lists at most one table,
// to check that the account answers. The first failure is returned, naming
// the resource; storage.ErrNotFound, storage.ErrAuth and the other
// sentinels of storage.Translate are in its chain.
//
// Bound each call with a context deadline: while storage is unreachable the
// SDK retries, and the call lasts as long as the context allows.
func ReadyCheck(c *storage.Clients, tables []string, queues []string) func(ctx context.Context) error {
	tables = append([]string(nil), tables...)
	queues = append([]string(nil), queues...)
	return func(ctx context.Context) error {
		if c == nil || c.Table == nil || c.Queue == nil {
			return errors.New("storage clients not configured")
		}
		top := int32(1)
		for _, name := range tables {
			sel := "RowKey"
			pager := c.Table.NewClient(name).NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top, Select: &sel})
			if _, err := pager.NextPage(ctx); err != nil {
				return describe("table", name, err)
			}
		}
		for _, name := range queues {
			if _, err := c.Queue.NewQueueClient(name).GetProperties(ctx, nil); err != nil {
				return describe("queue", name, err)
			}
		}
		if len(tables) == 0 && len(queues) == 0 {
			if _, err := c.Table.NewListTablesPager(&aztables.ListTablesOptions{Top: &top}).NextPage(ctx); err != nil {
				return fmt.Errorf("storage account %s: %w", c.Account, storage.Translate(err))
			}
		}
		return nil
	}
}

func describe(kind, name string, err error) error {
	err = storage.Translate(err)
	if errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("%s %s does not exist: %w", kind, name, err)
	}
	return fmt.Errorf("%s %s: %w", kind, name, err)
}
