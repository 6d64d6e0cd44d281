package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/tools/bench/results"
)

// azuriteTableCosts measures what Azurite's own CPU pays for table
// transactions of 1, 3, 6 and 30 inserts (entities shaped like a run's
// rows, four partitions, eight callers), so that the consumer section can
// say what a task's claim and finish cost the emulator.
func (b *bench) azuriteTableCosts(ctx context.Context, entities int) ([]results.TableCost, error) {
	var out []results.TableCost
	for _, per := range []int{1, 3, 6, 30} {
		c, err := b.tableCost(ctx, entities, per)
		if err != nil {
			return nil, fmt.Errorf("%d entities per transaction: %w", per, err)
		}
		b.logf("consumer", "Azurite CPU for %d-entity transactions: %.2f ms each, %.3f ms per entity", per, c.PerRequestMs(), c.PerEntityMs())
		out = append(out, c)
	}
	return out, nil
}

func (b *bench) tableCost(ctx context.Context, entities, per int) (results.TableCost, error) {
	srv, err := b.startAzurite(ctx, "consumer")
	if err != nil {
		return results.TableCost{}, err
	}
	defer srv.Stop()
	sc, err := clients(srv, nil)
	if err != nil {
		return results.TableCost{}, err
	}
	const table = "Costs"
	if err := sc.EnsureTable(ctx, table); err != nil {
		return results.TableCost{}, err
	}
	tc := sc.Table.NewClient(table)
	n := entities / per
	before, err := readProc(srv.Pid())
	if err != nil {
		return results.TableCost{}, err
	}
	jobs := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := costTransaction(ctx, tc, i, per); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return results.TableCost{}, err
	default:
	}
	after, err := readProc(srv.Pid())
	if err != nil {
		return results.TableCost{}, err
	}
	return results.TableCost{EntitiesPerRequest: per, Requests: n, AzuriteCPUSeconds: after.CPU - before.CPU}, nil
}

// costTransaction inserts per entities into partition i mod 4: one insert
// request when per is 1, else one transaction.
func costTransaction(ctx context.Context, tc *aztables.Client, i, per int) error {
	acts := make([]aztables.TransactionAction, 0, per)
	for j := 0; j < per; j++ {
		e, err := json.Marshal(map[string]any{
			"PartitionKey": fmt.Sprintf("p%d", i%4), "RowKey": fmt.Sprintf("r~%08d~%02d", i, j),
			"State": "running", "Type": "noop", "Worker": "w1", "Attempts": 1, "Due": "2026-11-24T00:00:00Z",
		})
		if err != nil {
			return err
		}
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: e})
	}
	if per == 1 {
		_, err := tc.AddEntity(ctx, acts[0].Entity, nil)
		return err
	}
	_, err := tc.SubmitTransaction(ctx, acts, nil)
	return err
}
