package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/storage"
)

// azTable is the table seam over one Azure table (or Azurite).
type azTable struct {
	c    *aztables.Client
	name string
}

func (t *azTable) create(ctx context.Context) error {
	_, err := t.c.CreateTable(ctx, nil)
	if err = storage.Translate(err); err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
		return fmt.Errorf("create table %s: %w", t.name, err)
	}
	return nil
}

func (t *azTable) get(ctx context.Context, pk, rk string) (row, error) {
	resp, err := t.c.GetEntity(ctx, pk, rk, nil)
	if err != nil {
		return row{}, fmt.Errorf("read %s/%s/%s: %w", t.name, pk, rk, storage.Translate(err))
	}
	return decodeRow(resp.Value, string(resp.ETag))
}

// filter renders q as an OData filter.
func (q query) filter() string {
	parts := []string{"PartitionKey eq " + odataString(q.pk)}
	if q.pk == "" {
		parts = []string{"PartitionKey ge " + odataString(q.pkFrom), "PartitionKey le " + odataString(q.pkTo)}
	}
	if q.from != "" {
		parts = append(parts, "RowKey ge "+odataString(q.from))
	}
	if q.to != "" {
		parts = append(parts, "RowKey lt "+odataString(q.to))
	}
	for _, c := range q.where {
		parts = append(parts, c.odata())
	}
	return strings.Join(parts, " and ")
}

func (t *azTable) query(ctx context.Context, q query) (page, error) {
	f := q.filter()
	o := &aztables.ListEntitiesOptions{Filter: &f}
	if len(q.sel) > 0 {
		o.Select = to.Ptr("PartitionKey,RowKey," + strings.Join(q.sel, ","))
	}
	if q.top > 0 {
		o.Top = to.Ptr(int32(min(q.top, 1000)))
	}
	if q.cont != "" {
		npk, nrk, ok := strings.Cut(q.cont, "\n")
		if !ok {
			return page{}, fmt.Errorf("query %s: malformed continuation %q", t.name, q.cont)
		}
		o.NextPartitionKey, o.NextRowKey = &npk, &nrk
	}
	resp, err := t.c.NewListEntitiesPager(o).NextPage(ctx)
	if err != nil {
		return page{}, fmt.Errorf("query %s (%s): %w", t.name, f, storage.Translate(err))
	}
	p := page{rows: make([]row, 0, len(resp.Entities))}
	for _, b := range resp.Entities {
		r, err := decodeRow(b, "")
		if err != nil {
			return page{}, fmt.Errorf("query %s: %w", t.name, err)
		}
		p.rows = append(p.rows, r)
	}
	if npk, nrk := deref(resp.NextPartitionKey), deref(resp.NextRowKey); npk != "" || nrk != "" {
		p.cont = npk + "\n" + nrk
	}
	return p, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func etag(s string) *azcore.ETag {
	if s == "" {
		return to.Ptr(azcore.ETagAny)
	}
	return to.Ptr(azcore.ETag(s))
}

// submit sends one operation as a plain request and more as one
// entity-group transaction.
func (t *azTable) submit(ctx context.Context, ops []op) error {
	switch {
	case len(ops) == 0:
		return nil
	case len(ops) > maxOps:
		return fmt.Errorf("runs: %d operations in one transaction, at most %d", len(ops), maxOps)
	case len(ops) == 1:
		return t.one(ctx, ops[0])
	}
	actions := make([]aztables.TransactionAction, len(ops))
	for i, o := range ops {
		a := &actions[i]
		var err error
		switch o.kind {
		case opInsert:
			a.ActionType = aztables.TransactionTypeAdd
		case opDelete:
			// Delete keys go into the request URL, where OData wants a
			// single quote doubled; run keys never hold one (validateID).
			a.ActionType = aztables.TransactionTypeDelete
			a.IfMatch = etag(o.ifMatch)
		case opMerge:
			a.ActionType, a.IfMatch = aztables.TransactionTypeUpdateMerge, etag(o.ifMatch)
		case opReplace:
			a.ActionType, a.IfMatch = aztables.TransactionTypeUpdateReplace, etag(o.ifMatch)
		case opUpsert:
			a.ActionType = aztables.TransactionTypeInsertReplace
		case opUpsertMerge:
			a.ActionType = aztables.TransactionTypeInsertMerge
		}
		if a.Entity, err = encodeProps(o.pk, o.rk, o.p); err != nil {
			return err
		}
	}
	if _, err := t.c.SubmitTransaction(ctx, actions, nil); err != nil {
		return fmt.Errorf("transaction of %d operations on %s/%s: %w", len(ops), t.name, ops[0].pk, storage.Translate(err))
	}
	return nil
}

func (t *azTable) one(ctx context.Context, o op) error {
	var err error
	if o.kind == opDelete {
		_, err = t.c.DeleteEntity(ctx, o.pk, o.rk, &aztables.DeleteEntityOptions{IfMatch: etag(o.ifMatch)})
	} else {
		var b []byte
		if b, err = encodeProps(o.pk, o.rk, o.p); err != nil {
			return err
		}
		switch o.kind {
		case opInsert:
			_, err = t.c.AddEntity(ctx, b, nil)
		case opMerge:
			_, err = t.c.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: etag(o.ifMatch), UpdateMode: aztables.UpdateModeMerge})
		case opReplace:
			_, err = t.c.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: etag(o.ifMatch), UpdateMode: aztables.UpdateModeReplace})
		case opUpsert:
			_, err = t.c.UpsertEntity(ctx, b, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		case opUpsertMerge:
			_, err = t.c.UpsertEntity(ctx, b, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge})
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s/%s/%s: %w", o.kind, t.name, o.pk, o.rk, storage.Translate(err))
	}
	return nil
}
