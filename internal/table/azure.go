package table

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/storage"
)

// Azure is the Table over one Azure table (or Azurite).
type Azure struct {
	c    *aztables.Client
	name string
}

var _ Table = (*Azure)(nil)

// NewAzure returns the table name of the account svc points at. It does
// not contact the service; Create makes the table.
func NewAzure(svc *aztables.ServiceClient, name string) (*Azure, error) {
	if err := storage.ValidateTableName(name); err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, errors.New("table.NewAzure: nil table service client")
	}
	return &Azure{c: svc.NewClient(name), name: name}, nil
}

// Name implements Table.
func (t *Azure) Name() string { return t.name }

// Create implements Table.
func (t *Azure) Create(ctx context.Context) error {
	_, err := t.c.CreateTable(ctx, nil)
	if err = storage.Translate(err); err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
		return fmt.Errorf("create table %s: %w", t.name, err)
	}
	return nil
}

// Get implements Table.
func (t *Azure) Get(ctx context.Context, pk, rk string) (Entity, error) {
	resp, err := t.c.GetEntity(ctx, pk, rk, nil)
	if err != nil {
		return Entity{}, fmt.Errorf("read %s/%s/%s: %w", t.name, pk, rk, storage.Translate(err))
	}
	return Decode(resp.Value, string(resp.ETag))
}

// Query implements Table.
func (t *Azure) Query(ctx context.Context, q Query) (Page, error) {
	f := q.Filter()
	o := &aztables.ListEntitiesOptions{Filter: &f}
	if len(q.Select) > 0 {
		sel := []string{"PartitionKey", "RowKey"}
		for _, s := range q.Select {
			if s != "PartitionKey" && s != "RowKey" {
				sel = append(sel, s)
			}
		}
		o.Select = to.Ptr(strings.Join(sel, ","))
	}
	if q.Top > 0 {
		o.Top = to.Ptr(int32(min(q.Top, MaxPage)))
	}
	if q.Continuation != "" {
		npk, nrk, err := splitContinuation(q.Continuation)
		if err != nil {
			return Page{}, fmt.Errorf("query %s: %w: %w", t.name, storage.ErrBadRequest, err)
		}
		o.NextPartitionKey, o.NextRowKey = &npk, &nrk
	}
	resp, err := t.c.NewListEntitiesPager(o).NextPage(ctx)
	if err != nil {
		return Page{}, fmt.Errorf("query %s (%s): %w", t.name, f, storage.Translate(err))
	}
	p := Page{Entities: make([]Entity, 0, len(resp.Entities))}
	for _, b := range resp.Entities {
		e, err := Decode(b, "")
		if err != nil {
			return Page{}, fmt.Errorf("query %s: %w", t.name, err)
		}
		p.Entities = append(p.Entities, e)
	}
	if npk, nrk := deref(resp.NextPartitionKey), deref(resp.NextRowKey); npk != "" || nrk != "" {
		p.Continuation = npk + "\n" + nrk
	}
	return p, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func etagOrAny(s string) *azcore.ETag {
	if s == "" {
		return to.Ptr(azcore.ETagAny)
	}
	return to.Ptr(azcore.ETag(s))
}

// Submit implements Table. A single operation is sent as a plain request,
// more as one entity-group transaction whose per-operation responses give
// the new ETags.
func (t *Azure) Submit(ctx context.Context, ops []Op) ([]string, error) {
	if err := checkTxn(t.name, ops); err != nil {
		return nil, err
	}
	switch len(ops) {
	case 0:
		return nil, nil
	case 1:
		etag, err := t.single(ctx, ops[0])
		if err != nil {
			return nil, err
		}
		return []string{etag}, nil
	}
	actions := make([]aztables.TransactionAction, len(ops))
	for i, op := range ops {
		a := &actions[i]
		var err error
		switch op.Kind {
		case Insert:
			a.ActionType = aztables.TransactionTypeAdd
			a.Entity, err = Encode(op.PartitionKey, op.RowKey, op.Props)
		case Delete:
			// The SDK puts a delete's keys into the request URL without
			// the quote doubling OData needs; a delete has no body, so
			// escape them here.
			a.ActionType, a.IfMatch = aztables.TransactionTypeDelete, etagOrAny(op.IfMatch)
			a.Entity, err = Encode(strings.ReplaceAll(op.PartitionKey, "'", "''"), strings.ReplaceAll(op.RowKey, "'", "''"), nil)
		case Merge, Replace, Upsert, UpsertMerge:
			if strings.Contains(op.PartitionKey+op.RowKey, "'") {
				return nil, fmt.Errorf("submit to %s: %w: %s of %s/%s: keys with a single quote cannot be updated in a transaction", t.name, storage.ErrBadRequest, op.Kind, op.PartitionKey, op.RowKey)
			}
			a.ActionType = map[OpKind]aztables.TransactionType{
				Merge: aztables.TransactionTypeUpdateMerge, Replace: aztables.TransactionTypeUpdateReplace,
				Upsert: aztables.TransactionTypeInsertReplace, UpsertMerge: aztables.TransactionTypeInsertMerge,
			}[op.Kind]
			if op.Kind.conditional() {
				a.IfMatch = etagOrAny(op.IfMatch)
			}
			a.Entity, err = Encode(op.PartitionKey, op.RowKey, op.Props)
		default:
			return nil, fmt.Errorf("submit to %s: %w: unknown operation %v", t.name, storage.ErrBadRequest, op.Kind)
		}
		if err != nil {
			return nil, err
		}
	}
	var resp *http.Response
	if _, err := t.c.SubmitTransaction(policy.WithCaptureResponse(ctx, &resp), actions, nil); err != nil {
		return nil, fmt.Errorf("transaction of %d operations on %s/%s: %w", len(ops), t.name, ops[0].PartitionKey, storage.Translate(err))
	}
	return batchETags(resp, len(ops)), nil
}

func (t *Azure) single(ctx context.Context, op Op) (string, error) {
	var err error
	var etag azcore.ETag
	if op.Kind == Delete {
		_, err = t.c.DeleteEntity(ctx, op.PartitionKey, op.RowKey, &aztables.DeleteEntityOptions{IfMatch: etagOrAny(op.IfMatch)})
	} else {
		var b []byte
		if b, err = Encode(op.PartitionKey, op.RowKey, op.Props); err != nil {
			return "", err
		}
		switch op.Kind {
		case Insert:
			var r aztables.AddEntityResponse
			r, err = t.c.AddEntity(ctx, b, nil)
			etag = r.ETag
		case Merge, Replace:
			mode := aztables.UpdateModeMerge
			if op.Kind == Replace {
				mode = aztables.UpdateModeReplace
			}
			var r aztables.UpdateEntityResponse
			r, err = t.c.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: etagOrAny(op.IfMatch), UpdateMode: mode})
			etag = r.ETag
		case Upsert, UpsertMerge:
			mode := aztables.UpdateModeReplace
			if op.Kind == UpsertMerge {
				mode = aztables.UpdateModeMerge
			}
			var r aztables.UpsertEntityResponse
			r, err = t.c.UpsertEntity(ctx, b, &aztables.UpsertEntityOptions{UpdateMode: mode})
			etag = r.ETag
		default:
			return "", fmt.Errorf("submit to %s: %w: unknown operation %v", t.name, storage.ErrBadRequest, op.Kind)
		}
	}
	if err != nil {
		return "", fmt.Errorf("%s %s/%s/%s: %w", op.Kind, t.name, op.PartitionKey, op.RowKey, storage.Translate(err))
	}
	return string(etag), nil
}

// batchETags reads the ETag of each operation's response from a committed
// transaction's multipart response: one part per operation, in order. It
// returns nil when the response cannot be read that way (the caller then
// re-reads what it needs).
func batchETags(resp *http.Response, n int) []string {
	if resp == nil {
		return nil
	}
	body, err := runtime.Payload(resp)
	if err != nil {
		return nil
	}
	parts, err := multipartParts(resp.Header.Get("Content-Type"), body)
	if err != nil || len(parts) != 1 {
		return nil
	}
	// The one part of the batch response is the changeset's response.
	changeset, err := multipartParts(parts[0].ctype, parts[0].body)
	if err != nil || len(changeset) != n {
		return nil
	}
	etags := make([]string, n)
	for i, p := range changeset {
		r, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(p.body)), nil)
		if err != nil {
			return nil
		}
		_ = r.Body.Close()
		if r.StatusCode/100 != 2 {
			return nil
		}
		etags[i] = r.Header.Get("ETag")
	}
	return etags
}

type mimePart struct {
	ctype string
	body  []byte
}

// multipartParts splits a multipart body whose Content-Type is ctype.
func multipartParts(ctype string, body []byte) ([]mimePart, error) {
	mt, params, err := mime.ParseMediaType(ctype)
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return nil, fmt.Errorf("not a multipart body: %q", ctype)
	}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var out []mimePart
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return nil, err
		}
		out = append(out, mimePart{ctype: p.Header.Get("Content-Type"), body: b})
	}
}
