package storage

import (
	"context"
	"errors"
	"fmt"
)

// EnsureTable creates the table if it does not exist.
func (c *Clients) EnsureTable(ctx context.Context, name string) error {
	if err := ValidateTableName(name); err != nil {
		return err
	}
	_, err := c.Table.CreateTable(ctx, name, nil)
	if err = Translate(err); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	return nil
}

// EnsureQueue creates the queue if it does not exist.
func (c *Clients) EnsureQueue(ctx context.Context, name string) error {
	if err := ValidateQueueName(name); err != nil {
		return err
	}
	_, err := c.Queue.CreateQueue(ctx, name, nil)
	if err = Translate(err); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return fmt.Errorf("create queue %s: %w", name, err)
	}
	return nil
}

// EnsureContainer creates the blob container if it does not exist.
func (c *Clients) EnsureContainer(ctx context.Context, name string) error {
	if err := ValidateContainerName(name); err != nil {
		return err
	}
	if err := CreateContainer(ctx, c.Blob.NewContainerClient(name)); err != nil {
		return fmt.Errorf("create container %s: %w", name, err)
	}
	return nil
}
