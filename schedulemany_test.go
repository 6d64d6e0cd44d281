package leasecron

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/schedule"
)

// ScheduleMany on Azurite: every task pending and shown as scheduled; a
// second batch holding one pending id writes nothing, unless Partial.
func TestScheduleManyOnAzurite(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	names := Names{
		ScheduleTable: azuritetest.Name(t, "s"), RunsTable: azuritetest.Name(t, "r"), BlackboardTable: azuritetest.Name(t, "b"),
		Queue: azuritetest.Name(t, "q"), PoisonQueue: azuritetest.Name(t, "p"), Container: azuritetest.Name(t, "c"),
	}
	c, err := NewClient(ClientOptions{Storage: Storage{ConnectionString: srv.ConnectionString()}, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	due := time.Now().Add(time.Hour)
	var items []Item
	for i := range 150 {
		items = append(items, Item{ID: fmt.Sprintf("m%03d", i), Type: "mail", Payload: "p", Due: due})
	}
	res, err := c.ScheduleMany(ctx, items, ScheduleManyOptions{})
	if err != nil || len(res) != 150 || res[149].Item.ID != "m149" {
		t.Fatalf("ScheduleMany = %d results, %v", len(res), err)
	}
	st, err := c.Status(ctx, "m077")
	if err != nil || st.Pending == nil || st.State() != string(RunScheduled) {
		t.Fatalf("status of m077 = %+v, %v", st, err)
	}

	more := []Item{{ID: "n1", Type: "mail", Due: due}, {ID: "m010", Type: "mail", Due: due}, {ID: "n3", Type: "mail", Due: due}}
	res, err = c.ScheduleMany(ctx, more, ScheduleManyOptions{})
	if !errors.Is(err, schedule.ErrNotWritten) || !errors.Is(res[1].Err, ErrAlreadyScheduled) || !errors.Is(res[0].Err, schedule.ErrNotWritten) {
		t.Fatalf("a batch with a pending id: %v, %+v", err, res)
	}
	if _, err := c.Get(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("n1 of the refused batch: %v, want not found", err)
	}
	res, _ = c.ScheduleMany(ctx, more, ScheduleManyOptions{Partial: true})
	if res[0].Err != nil || res[2].Err != nil || !errors.Is(res[1].Err, ErrAlreadyScheduled) {
		t.Fatalf("partial: %+v", res)
	}
	if _, err := c.Get(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
}
