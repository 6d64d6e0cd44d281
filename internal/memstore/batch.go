package memstore

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strings"
)

// maxBatchOps is the most operations a changeset may hold.
const maxBatchOps = 100

// batchOp is one operation of a changeset as sent.
type batchOp struct {
	method, target string
	header         http.Header
	body           []byte
	contentID      string
}

// batch serves an entity-group transaction: one changeset of up to 100
// writes of one table's one partition, each row at most once, applied
// all or none. A failure answers 202 with the failing operation's own
// response, its message prefixed by the operation's index, as Azure does.
func (s *Server) batch(r *request) (*reply, error) {
	ops, err := readBatch(r)
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, errInput("The batch request holds no operation.")
	}
	changes := make([]*change, 0, len(ops))
	seen := make(map[string]bool, len(ops))
	for i, op := range ops {
		if i == maxBatchOps {
			return s.batchFailure(r, i, op, errInput("The batch request operation exceeds the maximum %d changes per change set.", maxBatchOps)), nil
		}
		sub, err := subRequest(r, op)
		if err != nil {
			return s.batchFailure(r, i, op, err), nil
		}
		res := parseResource(sub.path)
		if res.batch || res.tables || res.name == "" || sub.method == http.MethodGet {
			return s.batchFailure(r, i, op, errInput("A changeset holds only inserts, updates, merges and deletes of entities.")), nil
		}
		c, err := s.prepare(sub, res)
		if err != nil {
			return s.batchFailure(r, i, op, err), nil
		}
		c.contentID = op.contentID
		if i > 0 {
			first := changes[0]
			switch {
			case c.t != first.t:
				return s.batchFailure(r, i, op, errInput("All operations of a changeset must act on one table.")), nil
			case c.pk != first.pk:
				return s.batchFailure(r, i, op, fail(http.StatusBadRequest, "CommandsInBatchActOnDifferentPartitions", "All commands in a batch must operate on same entity group.")), nil
			}
		}
		if seen[c.rk] {
			return s.batchFailure(r, i, op, fail(http.StatusBadRequest, "InvalidDuplicateRow", "The batch request contains multiple changes with same row key. An entity can appear only once in a batch request.")), nil
		}
		seen[c.rk] = true
		changes = append(changes, c)
	}
	for i, c := range changes {
		if err := c.check(); err != nil {
			return s.batchFailure(r, i, ops[i], err), nil
		}
	}
	ts := s.stamp(r.now)
	replies := make([]*reply, len(changes))
	written := make([]*entity, len(changes))
	for i, c := range changes {
		written[i] = c.apply(ts)
		replies[i] = c.result(written[i])
	}
	s.committed(changes[0].t.name, changes[0].pk, changes, written)
	return s.batchReply(ops, replies), nil
}

// readBatch reads the operations of the one changeset of a $batch body.
func readBatch(r *request) ([]batchOp, error) {
	mt, params, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return nil, errInput("A $batch request is multipart/mixed with a boundary, not %q.", r.header.Get("Content-Type"))
	}
	outer := multipart.NewReader(bytes.NewReader(r.body), params["boundary"])
	part, err := outer.NextPart()
	if err != nil {
		return nil, errInput("The $batch body holds no changeset: %v", err)
	}
	mt, params, err = mime.ParseMediaType(part.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return nil, errInput("memstore serves a $batch of one changeset, not a part of type %q.", part.Header.Get("Content-Type"))
	}
	inner := multipart.NewReader(part, params["boundary"])
	var ops []batchOp
	for {
		p, err := inner.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errInput("The changeset is not valid multipart: %v", err)
		}
		raw, err := io.ReadAll(p)
		if err != nil {
			return nil, errInput("The changeset is not valid multipart: %v", err)
		}
		op, err := parseOperation(raw)
		if err != nil {
			return nil, err
		}
		op.contentID = cmp.Or(p.Header.Get("Content-Id"), op.header.Get("Content-Id"))
		ops = append(ops, op)
	}
	if _, err := outer.NextPart(); !errors.Is(err, io.EOF) {
		return nil, errInput("memstore serves a $batch of one changeset only.")
	}
	return ops, nil
}

// parseOperation reads an application/http part: a request line, headers
// and a body (everything after the blank line).
func parseOperation(raw []byte) (batchOp, error) {
	head, body, found := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !found {
		head, body, found = bytes.Cut(raw, []byte("\n\n"))
	}
	if !found {
		head, body = raw, nil
	}
	tp := textproto.NewReader(bufio.NewReader(io.MultiReader(bytes.NewReader(head), strings.NewReader("\r\n\r\n"))))
	line, err := tp.ReadLine()
	if err != nil {
		return batchOp{}, errInput("A changeset operation has no request line.")
	}
	f := strings.Fields(line)
	if len(f) != 3 || !strings.HasPrefix(f[2], "HTTP/") {
		return batchOp{}, errInput("A changeset operation's request line %q is not METHOD URL HTTP/1.1.", line)
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return batchOp{}, errInput("A changeset operation's headers are malformed: %v", err)
	}
	return batchOp{method: f[0], target: f[1], header: http.Header(mh), body: body}, nil
}

// subRequest makes a request of a changeset operation.
func subRequest(r *request, op batchOp) (*request, error) {
	u, err := url.Parse(op.target)
	if err != nil {
		return nil, errInput("A changeset operation's URL %q is malformed.", op.target)
	}
	path := strings.TrimPrefix(u.Path, "/")
	account, rest, _ := strings.Cut(path, "/")
	return &request{method: op.method, account: account, path: rest, query: u.Query(), header: op.header, body: op.body, host: r.host, now: r.now}, nil
}

// spelling is how the service spells the headers whose canonical form
// differs.
var spelling = map[string]string{"Etag": "ETag", "Dataserviceid": "DataServiceId"}

func operationText(rep *reply, contentID string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", rep.status, http.StatusText(rep.status))
	if contentID != "" {
		b.WriteString("Content-ID: " + contentID + "\r\n")
	}
	b.WriteString("X-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\nDataServiceVersion: 3.0;\r\n")
	keys := make([]string, 0, len(rep.header))
	for k := range rep.header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range rep.header[k] {
			b.WriteString(cmp.Or(spelling[k], k) + ": " + v + "\r\n")
		}
	}
	b.WriteString("\r\n")
	b.Write(rep.body)
	return b.Bytes()
}

// batchReply renders the 202 of a batch whose operations answered
// replies (one each on success, the failing one's on failure).
func (s *Server) batchReply(ops []batchOp, replies []*reply) *reply {
	batchB, csB := "batchresponse_"+idFrom(s.next()), "changesetresponse_"+idFrom(s.next())
	var cs bytes.Buffer
	w := multipart.NewWriter(&cs)
	_ = w.SetBoundary(csB)
	for i, rep := range replies {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", "application/http")
		h.Set("Content-Transfer-Encoding", "binary")
		part, _ := w.CreatePart(h)
		_, _ = part.Write(operationText(rep, ops[i].contentID))
	}
	_ = w.Close()
	var out bytes.Buffer
	ow := multipart.NewWriter(&out)
	_ = ow.SetBoundary(batchB)
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", "multipart/mixed; boundary="+csB)
	part, _ := ow.CreatePart(h)
	_, _ = part.Write(cs.Bytes())
	_ = ow.Close()
	rep := newReply(http.StatusAccepted)
	rep.header.Set("Content-Type", "multipart/mixed; boundary="+batchB)
	rep.body = out.Bytes()
	return rep
}

// batchFailure renders the 202 of a batch whose operation i failed with
// err.
func (s *Server) batchFailure(r *request, i int, op batchOp, err error) *reply {
	var se *svcError
	if !errors.As(err, &se) {
		se = fail(http.StatusInternalServerError, "InternalError", "%v", err)
	}
	reqID := idFrom(s.next())
	rep := newReply(se.status)
	rep.header.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
	rep.body = tableErrorBody(se.code, fmt.Sprintf("%d:%s\nRequestId:%s\nTime:%s", i, se.msg, reqID, r.now.Format(edmTime)))
	ops := []batchOp{op}
	return s.batchReply(ops, []*reply{rep})
}
