package schedule

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

// AzureTable is the Table implementation over one Azure table (or Azurite).
type AzureTable struct {
	c    *aztables.Client
	name string
}

var _ Table = (*AzureTable)(nil)

// NewAzureTable returns the table name of the account svc points at. It
// does not contact the service; Create makes the table.
func NewAzureTable(svc *aztables.ServiceClient, name string) (*AzureTable, error) {
	if err := storage.ValidateTableName(name); err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, errors.New("schedule.NewAzureTable: nil table service client")
	}
	return &AzureTable{c: svc.NewClient(name), name: name}, nil
}

// Name returns the table name.
func (t *AzureTable) Name() string { return t.name }

// Create creates the table if it does not exist.
func (t *AzureTable) Create(ctx context.Context) error {
	_, err := t.c.CreateTable(ctx, nil)
	if err = storage.Translate(err); err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
		return fmt.Errorf("create table %s: %w", t.name, err)
	}
	return nil
}

// odataString quotes s as an OData string literal.
func odataString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Query implements Table.
func (t *AzureTable) Query(ctx context.Context, q Query) (Page, error) {
	filter := "PartitionKey eq " + odataString(q.Partition)
	if q.From != "" {
		filter += " and RowKey ge " + odataString(q.From)
	}
	if q.To != "" {
		filter += " and RowKey lt " + odataString(q.To)
	}
	if q.Type != "" {
		filter += " and Type eq " + odataString(q.Type)
	}
	if q.Recurring {
		filter += " and Recurrence gt ''"
	}
	opts := &aztables.ListEntitiesOptions{Filter: &filter}
	if len(q.Select) > 0 {
		sel := []string{"PartitionKey", "RowKey"}
		for _, s := range q.Select {
			if s != "PartitionKey" && s != "RowKey" {
				sel = append(sel, s)
			}
		}
		opts.Select = to.Ptr(strings.Join(sel, ","))
	}
	if q.Top > 0 {
		opts.Top = to.Ptr(q.Top)
	}
	if q.Continuation != "" {
		pk, rk, ok := strings.Cut(q.Continuation, "\n")
		if !ok {
			return Page{}, fmt.Errorf("query %s: bad continuation %q", t.name, q.Continuation)
		}
		opts.NextPartitionKey, opts.NextRowKey = &pk, &rk
	}
	pager := t.c.NewListEntitiesPager(opts)
	resp, err := pager.NextPage(ctx)
	if err != nil {
		return Page{}, fmt.Errorf("query %s (%s): %w", t.name, filter, storage.Translate(err))
	}
	p := Page{Entities: make([]Entity, 0, len(resp.Entities))}
	for _, raw := range resp.Entities {
		e, err := decodeEntity(raw, "")
		if err != nil {
			return Page{}, fmt.Errorf("query %s: %w", t.name, err)
		}
		p.Entities = append(p.Entities, e)
	}
	npk, nrk := deref(resp.NextPartitionKey), deref(resp.NextRowKey)
	if npk != "" || nrk != "" {
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

// Get implements Table.
func (t *AzureTable) Get(ctx context.Context, pk, rk string) (Entity, error) {
	resp, err := t.c.GetEntity(ctx, pk, rk, nil)
	if err != nil {
		return Entity{}, fmt.Errorf("get %s/%s/%s: %w", t.name, pk, rk, storage.Translate(err))
	}
	return decodeEntity(resp.Value, string(resp.ETag))
}

func etagOrAny(s string) *azcore.ETag {
	if s == "" {
		return to.Ptr(azcore.ETagAny)
	}
	return to.Ptr(azcore.ETag(s))
}

// Submit implements Table. A single operation is sent as a plain request, more
// as one entity-group transaction; the new ETags are read from the
// transaction's per-operation responses.
func (t *AzureTable) Submit(ctx context.Context, ops []Op) ([]string, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if len(ops) > MaxOps {
		return nil, fmt.Errorf("submit %s: %d operations, a transaction holds at most %d", t.name, len(ops), MaxOps)
	}
	if len(ops) == 1 {
		etag, err := t.single(ctx, ops[0])
		if err != nil {
			return nil, err
		}
		return []string{etag}, nil
	}
	actions := make([]aztables.TransactionAction, 0, len(ops))
	for _, op := range ops {
		a := aztables.TransactionAction{}
		var err error
		switch op.Kind {
		case OpInsert:
			a.ActionType = aztables.TransactionTypeAdd
			a.Entity, err = encodeEntity(op.PartitionKey, op.RowKey, op.Props)
		case OpDelete:
			// The SDK puts delete keys into the request URL without the
			// quote doubling OData needs; a delete has no body, so escape here.
			a.ActionType = aztables.TransactionTypeDelete
			a.Entity, err = encodeEntity(strings.ReplaceAll(op.PartitionKey, "'", "''"), strings.ReplaceAll(op.RowKey, "'", "''"), nil)
			a.IfMatch = etagOrAny(op.IfMatch)
		case OpMerge, OpReplace:
			if strings.Contains(op.PartitionKey+op.RowKey, "'") {
				return nil, fmt.Errorf("submit %s: %s of %s/%s: keys with a single quote cannot be updated in a transaction", t.name, op.Kind, op.PartitionKey, op.RowKey)
			}
			a.ActionType = aztables.TransactionTypeUpdateMerge
			if op.Kind == OpReplace {
				a.ActionType = aztables.TransactionTypeUpdateReplace
			}
			a.Entity, err = encodeEntity(op.PartitionKey, op.RowKey, op.Props)
			a.IfMatch = etagOrAny(op.IfMatch)
		default:
			return nil, fmt.Errorf("submit %s: unknown operation %v", t.name, op.Kind)
		}
		if err != nil {
			return nil, err
		}
		actions = append(actions, a)
	}
	var resp *http.Response
	if _, err := t.c.SubmitTransaction(policy.WithCaptureResponse(ctx, &resp), actions, nil); err != nil {
		return nil, fmt.Errorf("transaction of %d operations on %s/%s: %w", len(ops), t.name, ops[0].PartitionKey, storage.Translate(err))
	}
	return batchETags(resp, len(ops)), nil
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
		if err == io.EOF {
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

func (t *AzureTable) single(ctx context.Context, op Op) (string, error) {
	var err error
	var etag azcore.ETag
	switch op.Kind {
	case OpInsert:
		var b []byte
		if b, err = encodeEntity(op.PartitionKey, op.RowKey, op.Props); err != nil {
			return "", err
		}
		var r aztables.AddEntityResponse
		r, err = t.c.AddEntity(ctx, b, nil)
		etag = r.ETag
	case OpDelete:
		_, err = t.c.DeleteEntity(ctx, op.PartitionKey, op.RowKey, &aztables.DeleteEntityOptions{IfMatch: etagOrAny(op.IfMatch)})
	case OpMerge, OpReplace:
		var b []byte
		if b, err = encodeEntity(op.PartitionKey, op.RowKey, op.Props); err != nil {
			return "", err
		}
		mode := aztables.UpdateModeMerge
		if op.Kind == OpReplace {
			mode = aztables.UpdateModeReplace
		}
		var r aztables.UpdateEntityResponse
		r, err = t.c.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: etagOrAny(op.IfMatch), UpdateMode: mode})
		etag = r.ETag
	default:
		return "", fmt.Errorf("submit %s: unknown operation %v", t.name, op.Kind)
	}
	if err != nil {
		return "", fmt.Errorf("%s %s/%s/%s: %w", op.Kind, t.name, op.PartitionKey, op.RowKey, storage.Translate(err))
	}
	return string(etag), nil
}
