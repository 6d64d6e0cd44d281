package memstore

import (
	"cmp"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

type container struct {
	name     string
	meta     map[string]string
	etag     string
	modified time.Time
	blobs    map[string]*blob
	names    []string // blob names, sorted
}

type blob struct {
	name              string
	data              []byte
	meta              map[string]string
	content           contentProps
	etag              string
	created, modified time.Time
	lease             lease
}

// contentProps are a blob's content headers.
type contentProps struct {
	typ, encoding, language, cache, disposition string
	md5                                         []byte
}

// Lease states as the service names them.
const (
	leaseAvailable = "available"
	leaseLeased    = "leased"
	leaseExpired   = "expired"
	leaseBreaking  = "breaking"
	leaseBroken    = "broken"
)

// lease is a blob's lease. Its state is settled against the clock on each
// request (settle): a fixed lease past its expiry is expired, a breaking
// lease past its break time is broken.
type lease struct {
	state    string // "" means available
	id       string
	infinite bool
	duration int // seconds, of a fixed lease
	expires  time.Time
	breakAt  time.Time
}

func (l *lease) settle(now time.Time) {
	switch l.state {
	case "":
		l.state = leaseAvailable
	case leaseLeased:
		if !l.infinite && !now.Before(l.expires) {
			l.state = leaseExpired
		}
	case leaseBreaking:
		if !now.Before(l.breakAt) {
			l.state = leaseBroken
		}
	}
}

// locked reports whether the lease is in force (leased or breaking).
func (l *lease) locked() bool { return l.state == leaseLeased || l.state == leaseBreaking }

func (l *lease) headers(h http.Header) {
	h.Set("X-Ms-Lease-State", l.state)
	if l.locked() {
		h.Set("X-Ms-Lease-Status", "locked")
	} else {
		h.Set("X-Ms-Lease-Status", "unlocked")
	}
	if l.state == leaseLeased {
		h.Set("X-Ms-Lease-Duration", l.durationName())
	}
}

func (l *lease) durationName() string {
	if l.infinite {
		return "infinite"
	}
	return "fixed"
}

// blobETag returns a new ETag; the caller holds s.mu.
func (s *Server) blobETag() string { return fmt.Sprintf("\"0x8DC%012X\"", s.next()) }

// blob serves one Blob service request; the caller holds s.mu.
func (s *Server) blob(r *request) (string, *reply, error) {
	comp, restype := r.q("comp"), r.q("restype")
	cname, bname, hasBlob := strings.Cut(r.path, "/")
	switch {
	case r.path == "":
		if comp == "list" && r.method == http.MethodGet {
			rep, err := s.listContainers(r)
			return "ListContainers", rep, err
		}
	case !hasBlob || bname == "":
		if restype != "container" {
			break
		}
		switch {
		case r.method == http.MethodPut && comp == "":
			rep, err := s.createContainer(r, cname)
			return "CreateContainer", rep, err
		case r.method == http.MethodPut && comp == "metadata":
			rep, err := s.setContainerMetadata(r, cname)
			return "SetContainerMetadata", rep, err
		case r.method == http.MethodDelete && comp == "":
			rep, err := s.deleteContainer(r, cname)
			return "DeleteContainer", rep, err
		case (r.method == http.MethodGet || r.method == http.MethodHead) && comp == "list":
			rep, err := s.listBlobs(r, cname)
			return "ListBlobs", rep, err
		case (r.method == http.MethodGet || r.method == http.MethodHead) && (comp == "" || comp == "metadata"):
			rep, err := s.containerProperties(r, cname)
			return "GetContainerProperties", rep, err
		}
	default:
		switch {
		case r.method == http.MethodPut && comp == "":
			rep, err := s.putBlob(r, cname, bname)
			return "PutBlob", rep, err
		case r.method == http.MethodPut && comp == "metadata":
			rep, err := s.setBlobMetadata(r, cname, bname)
			return "SetBlobMetadata", rep, err
		case r.method == http.MethodPut && comp == "properties":
			rep, err := s.setBlobProperties(r, cname, bname)
			return "SetBlobProperties", rep, err
		case r.method == http.MethodPut && comp == "lease":
			return s.leaseBlob(r, cname, bname)
		case r.method == http.MethodGet && comp == "":
			rep, err := s.getBlob(r, cname, bname, true)
			return "GetBlob", rep, err
		case r.method == http.MethodHead && comp == "", (r.method == http.MethodGet || r.method == http.MethodHead) && comp == "metadata":
			rep, err := s.getBlob(r, cname, bname, false)
			return "GetBlobProperties", rep, err
		case r.method == http.MethodDelete && comp == "":
			rep, err := s.deleteBlob(r, cname, bname)
			return "DeleteBlob", rep, err
		}
	}
	return "", nil, fail(http.StatusBadRequest, "UnsupportedHttpVerb", "%s %s?%s is not an operation memstore serves", r.method, r.path, encodeQuery(r.query))
}

func encodeQuery(q map[string][]string) string {
	var parts []string
	for k, vs := range q {
		for _, v := range vs {
			parts = append(parts, k+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}

// validName checks a container or queue name: 3-63 lower-case letters,
// digits and single hyphens, starting and ending with a letter or digit.
func validName(n string) bool {
	if len(n) < 3 || len(n) > 63 || n[0] == '-' || n[len(n)-1] == '-' {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && n[i-1] != '-':
		default:
			return false
		}
	}
	return true
}

// BlobNames returns the names of the blobs in container cname that begin
// with prefix, sorted (none when there is no such container): what a
// test finds left over at the end.
func (s *Server) BlobNames(cname, prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.containers[cname]
	if c == nil {
		return nil
	}
	var out []string
	for _, n := range c.names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

func (s *Server) container(name string) (*container, error) {
	c := s.containers[name]
	if c == nil {
		return nil, fail(http.StatusNotFound, "ContainerNotFound", "The specified container does not exist.")
	}
	return c, nil
}

// lookupBlob returns the container and the blob (nil if absent).
func (s *Server) lookupBlob(cname, bname string) (*container, *blob, error) {
	c, err := s.container(cname)
	if err != nil {
		return nil, nil, err
	}
	return c, c.blobs[bname], nil
}

// writableBlob is existingBlob for a write: the request's conditions and
// the blob's lease must allow it.
func (s *Server) writableBlob(r *request, cname, bname string) (*container, *blob, error) {
	c, b, err := s.existingBlob(r, cname, bname)
	if err != nil {
		return nil, nil, err
	}
	if err := conditions(r, true, b.etag, b.modified, false); err != nil {
		return nil, nil, err
	}
	if err := checkWriteLease(r, b); err != nil {
		return nil, nil, err
	}
	return c, b, nil
}

func (s *Server) existingBlob(r *request, cname, bname string) (*container, *blob, error) {
	c, b, err := s.lookupBlob(cname, bname)
	if err != nil {
		return nil, nil, err
	}
	if b == nil {
		return nil, nil, fail(http.StatusNotFound, "BlobNotFound", "The specified blob does not exist.")
	}
	b.lease.settle(r.now)
	return c, b, nil
}

func errNotModified() *svcError {
	return &svcError{status: http.StatusNotModified, code: "ConditionNotMet", msg: "The condition specified using HTTP conditional header(s) is not met."}
}

func errConditionNotMet() *svcError {
	return fail(http.StatusPreconditionFailed, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met.")
}

// etagMatches reports whether etag is among the ETags of an If-Match or
// If-None-Match value (a list; * matches any). Quotes and a weak prefix
// are ignored: the service returns ETags quoted in headers and unquoted
// in listings.
func etagMatches(list, etag string) bool {
	want := bareETag(etag)
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "*" || bareETag(e) == want {
			return true
		}
	}
	return false
}

func bareETag(e string) string {
	e = strings.TrimPrefix(strings.TrimSpace(e), "W/")
	return strings.Trim(e, `"`)
}

// conditions evaluates the conditional headers of r against a resource
// (exists, its ETag and Last-Modified). A read answers 304 where a write
// answers 412. If-None-Match: * is left to the caller (Put Blob answers
// 409 BlobAlreadyExists).
func conditions(r *request, exists bool, etag string, modified time.Time, read bool) error {
	h := r.header
	modified = modified.Truncate(time.Second)
	if v := h.Get("If-Match"); v != "" {
		if !exists || !etagMatches(v, etag) {
			return errConditionNotMet()
		}
	} else if v := h.Get("If-Unmodified-Since"); v != "" && exists {
		if t, err := http.ParseTime(v); err == nil && modified.After(t) {
			return errConditionNotMet()
		}
	}
	if v := h.Get("If-None-Match"); v != "" {
		if exists && strings.TrimSpace(v) != "*" && etagMatches(v, etag) {
			if read {
				return errNotModified()
			}
			return errConditionNotMet()
		}
	} else if v := h.Get("If-Modified-Since"); v != "" && exists {
		if t, err := http.ParseTime(v); err == nil && !modified.After(t) {
			if read {
				return errNotModified()
			}
			return errConditionNotMet()
		}
	}
	return nil
}

// validGUID reports whether s is a GUID (lease ids must be).
func validGUID(s string) bool {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

func sameLease(a, b string) bool { return strings.EqualFold(a, b) }

// checkWriteLease applies the lease rules of a write (or a delete) to b.
func checkWriteLease(r *request, b *blob) error {
	id := r.header.Get("X-Ms-Lease-Id")
	if b.lease.locked() {
		if id == "" {
			return fail(http.StatusPreconditionFailed, "LeaseIdMissing", "There is currently a lease on the blob and no lease ID was specified in the request.")
		}
		if !sameLease(id, b.lease.id) {
			return fail(http.StatusPreconditionFailed, "LeaseIdMismatchWithBlobOperation", "The lease ID specified did not match the lease ID for the blob.")
		}
		return nil
	}
	if id != "" {
		return fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "There is currently no lease on the blob.")
	}
	return nil
}

// checkReadLease applies the lease rules of a read: a lease id, when
// given, must be the one in force.
func checkReadLease(r *request, b *blob) error {
	id := r.header.Get("X-Ms-Lease-Id")
	if id == "" {
		return nil
	}
	if !b.lease.locked() {
		return fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "There is currently no lease on the blob.")
	}
	if !sameLease(id, b.lease.id) {
		return fail(http.StatusPreconditionFailed, "LeaseIdMismatchWithBlobOperation", "The lease ID specified did not match the lease ID for the blob.")
	}
	return nil
}

// modify stamps b as written now: a new ETag and Last-Modified, and an
// expired lease can no longer be renewed.
func (s *Server) modify(r *request, b *blob) {
	b.etag, b.modified = s.blobETag(), r.now
	if b.lease.state == leaseExpired {
		b.lease = lease{state: leaseAvailable}
	}
}

func (s *Server) createContainer(r *request, name string) (*reply, error) {
	if !validName(name) {
		return nil, fail(http.StatusBadRequest, "InvalidResourceName", "The specified resource name contains invalid characters.")
	}
	if s.containers[name] != nil {
		return nil, fail(http.StatusConflict, "ContainerAlreadyExists", "The specified container already exists.")
	}
	c := &container{name: name, meta: metadata(r.header), etag: s.blobETag(), modified: r.now, blobs: map[string]*blob{}}
	s.containers[name] = c
	rep := newReply(http.StatusCreated)
	rep.header.Set("ETag", c.etag)
	rep.header.Set("Last-Modified", rfc1123(c.modified))
	return rep, nil
}

func (s *Server) deleteContainer(r *request, name string) (*reply, error) {
	c, err := s.container(name)
	if err != nil {
		return nil, err
	}
	if err := conditions(r, true, c.etag, c.modified, false); err != nil {
		return nil, err
	}
	delete(s.containers, name)
	return newReply(http.StatusAccepted), nil
}

func (s *Server) containerProperties(r *request, name string) (*reply, error) {
	c, err := s.container(name)
	if err != nil {
		return nil, err
	}
	rep := newReply(http.StatusOK)
	rep.header.Set("ETag", c.etag)
	rep.header.Set("Last-Modified", rfc1123(c.modified))
	rep.header.Set("X-Ms-Lease-State", leaseAvailable)
	rep.header.Set("X-Ms-Lease-Status", "unlocked")
	rep.header.Set("X-Ms-Has-Immutability-Policy", "false")
	rep.header.Set("X-Ms-Has-Legal-Hold", "false")
	setMetadata(rep.header, c.meta)
	return rep, nil
}

func (s *Server) setContainerMetadata(r *request, name string) (*reply, error) {
	c, err := s.container(name)
	if err != nil {
		return nil, err
	}
	if err := conditions(r, true, c.etag, c.modified, false); err != nil {
		return nil, err
	}
	c.meta, c.etag, c.modified = metadata(r.header), s.blobETag(), r.now
	rep := newReply(http.StatusOK)
	rep.header.Set("ETag", c.etag)
	rep.header.Set("Last-Modified", rfc1123(c.modified))
	return rep, nil
}

// maxResults reads maxresults: 1 to 5000, 5000 when absent.
func maxResults(r *request) (int, error) {
	v := r.q("maxresults")
	if v == "" {
		return 5000, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fail(http.StatusBadRequest, "OutOfRangeQueryParameterValue", "maxresults=%q: want a whole number from 1 to 5000", v)
	}
	return min(n, 5000), nil
}

func includes(r *request, what string) bool {
	for _, v := range r.query["include"] {
		for _, w := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(w), what) {
				return true
			}
		}
	}
	return false
}

func (s *Server) listContainers(r *request) (*reply, error) {
	max, err := maxResults(r)
	if err != nil {
		return nil, err
	}
	prefix, marker := r.q("prefix"), r.q("marker")
	names := make([]string, 0, len(s.containers))
	for n := range s.containers {
		if strings.HasPrefix(n, prefix) && n >= marker {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	next := ""
	if len(names) > max {
		next, names = names[max], names[:max]
	}
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="` + xmlEscape(endpoint(r)) + `">`)
	listHead(&b, r)
	b.WriteString("<Containers>")
	withMeta := includes(r, "metadata")
	for _, n := range names {
		c := s.containers[n]
		b.WriteString("<Container><Name>" + xmlEscape(n) + "</Name><Properties><Last-Modified>" + rfc1123(c.modified) +
			"</Last-Modified><Etag>" + xmlEscape(c.etag) + "</Etag><LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState>" +
			"<HasImmutabilityPolicy>false</HasImmutabilityPolicy><HasLegalHold>false</HasLegalHold></Properties>")
		if withMeta {
			writeMetadata(&b, c.meta)
		}
		b.WriteString("</Container>")
	}
	b.WriteString("</Containers><NextMarker>" + xmlEscape(next) + "</NextMarker></EnumerationResults>")
	return xmlReply(b.String()), nil
}

func endpoint(r *request) string { return "http://" + r.host + "/" + r.account + "/" }

func listHead(b *strings.Builder, r *request) {
	for _, k := range []string{"prefix", "marker", "maxresults", "delimiter"} {
		if r.has(k) {
			tag := map[string]string{"prefix": "Prefix", "marker": "Marker", "maxresults": "MaxResults", "delimiter": "Delimiter"}[k]
			b.WriteString("<" + tag + ">" + xmlEscape(r.q(k)) + "</" + tag + ">")
		}
	}
}

func writeMetadata(b *strings.Builder, m map[string]string) {
	b.WriteString("<Metadata>")
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString("<" + k + ">" + xmlEscape(m[k]) + "</" + k + ">")
	}
	b.WriteString("</Metadata>")
}

func xmlReply(body string) *reply {
	rep := newReply(http.StatusOK)
	rep.header.Set("Content-Type", "application/xml")
	rep.body = []byte(body)
	return rep
}

func (s *Server) listBlobs(r *request, cname string) (*reply, error) {
	c, err := s.container(cname)
	if err != nil {
		return nil, err
	}
	max, err := maxResults(r)
	if err != nil {
		return nil, err
	}
	prefix, marker, delim := r.q("prefix"), r.q("marker"), r.q("delimiter")
	withMeta := includes(r, "metadata")
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="` + xmlEscape(endpoint(r)) + `" ContainerName="` + xmlEscape(cname) + `">`)
	listHead(&b, r)
	b.WriteString("<Blobs>")
	start := sort.SearchStrings(c.names, max2(prefix, marker))
	n, next := 0, ""
	for i := start; i < len(c.names); i++ {
		name := c.names[i]
		if !strings.HasPrefix(name, prefix) {
			break
		}
		group := ""
		if delim != "" {
			if j := strings.Index(name[len(prefix):], delim); j >= 0 {
				group = name[:len(prefix)+j+len(delim)]
			}
		}
		if n == max {
			next = name
			break
		}
		n++
		if group != "" {
			b.WriteString("<BlobPrefix><Name>" + xmlEscape(group) + "</Name></BlobPrefix>")
			for i+1 < len(c.names) && strings.HasPrefix(c.names[i+1], group) {
				i++
			}
			continue
		}
		bl := c.blobs[name]
		bl.lease.settle(r.now)
		b.WriteString("<Blob><Name>" + xmlEscape(name) + "</Name><Properties><Creation-Time>" + rfc1123(bl.created) +
			"</Creation-Time><Last-Modified>" + rfc1123(bl.modified) + "</Last-Modified><Etag>" + xmlEscape(bareETag(bl.etag)) +
			"</Etag><Content-Length>" + strconv.Itoa(len(bl.data)) + "</Content-Length><Content-Type>" + xmlEscape(bl.content.typ) + "</Content-Type>")
		for _, p := range [][2]string{{"Content-Encoding", bl.content.encoding}, {"Content-Language", bl.content.language}, {"Cache-Control", bl.content.cache}, {"Content-Disposition", bl.content.disposition}} {
			if p[1] != "" {
				b.WriteString("<" + p[0] + ">" + xmlEscape(p[1]) + "</" + p[0] + ">")
			}
		}
		if len(bl.content.md5) > 0 {
			b.WriteString("<Content-MD5>" + base64.StdEncoding.EncodeToString(bl.content.md5) + "</Content-MD5>")
		}
		b.WriteString("<BlobType>BlockBlob</BlobType><AccessTier>Hot</AccessTier><AccessTierInferred>true</AccessTierInferred>")
		b.WriteString("<LeaseStatus>")
		if bl.lease.locked() {
			b.WriteString("locked")
		} else {
			b.WriteString("unlocked")
		}
		b.WriteString("</LeaseStatus><LeaseState>" + bl.lease.state + "</LeaseState>")
		if bl.lease.state == leaseLeased {
			b.WriteString("<LeaseDuration>" + bl.lease.durationName() + "</LeaseDuration>")
		}
		b.WriteString("<ServerEncrypted>true</ServerEncrypted></Properties>")
		if withMeta {
			writeMetadata(&b, bl.meta)
		}
		b.WriteString("</Blob>")
	}
	b.WriteString("</Blobs><NextMarker>" + xmlEscape(next) + "</NextMarker></EnumerationResults>")
	return xmlReply(b.String()), nil
}

func max2(a, b string) string {
	if a > b {
		return a
	}
	return b
}

func readContentProps(h http.Header) contentProps {
	p := contentProps{
		typ:         cmp.Or(h.Get("X-Ms-Blob-Content-Type"), "application/octet-stream"),
		encoding:    h.Get("X-Ms-Blob-Content-Encoding"),
		language:    h.Get("X-Ms-Blob-Content-Language"),
		cache:       h.Get("X-Ms-Blob-Cache-Control"),
		disposition: h.Get("X-Ms-Blob-Content-Disposition"),
	}
	if v := h.Get("X-Ms-Blob-Content-Md5"); v != "" {
		p.md5, _ = base64.StdEncoding.DecodeString(v)
	}
	return p
}

func (s *Server) putBlob(r *request, cname, bname string) (*reply, error) {
	if t := r.header.Get("X-Ms-Blob-Type"); t != "BlockBlob" {
		if t == "" {
			return nil, fail(http.StatusBadRequest, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is not specified: x-ms-blob-type.")
		}
		return nil, fail(http.StatusBadRequest, "UnsupportedHeader", "x-ms-blob-type %s: memstore serves block blobs only", t)
	}
	if len(bname) > 1024 {
		return nil, fail(http.StatusBadRequest, "InvalidResourceName", "The specified resource name length is not within the permissible limits.")
	}
	c, b, err := s.lookupBlob(cname, bname)
	if err != nil {
		return nil, err
	}
	sum := md5.Sum(r.body)
	if v := r.header.Get("Content-Md5"); v != "" {
		if got, err := base64.StdEncoding.DecodeString(v); err != nil || string(got) != string(sum[:]) {
			return nil, fail(http.StatusBadRequest, "Md5Mismatch", "The MD5 value specified in the request did not match with the MD5 value calculated by the server.")
		}
	}
	exists := b != nil
	var etag string
	var modified time.Time
	if exists {
		b.lease.settle(r.now)
		etag, modified = b.etag, b.modified
	}
	if err := conditions(r, exists, etag, modified, false); err != nil {
		return nil, err
	}
	if exists && strings.TrimSpace(r.header.Get("If-None-Match")) == "*" {
		return nil, fail(http.StatusConflict, "BlobAlreadyExists", "The specified blob already exists.")
	}
	if exists {
		if err := checkWriteLease(r, b); err != nil {
			return nil, err
		}
	} else {
		if r.header.Get("X-Ms-Lease-Id") != "" {
			return nil, fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "There is currently no lease on the blob.")
		}
		b = &blob{name: bname, created: r.now, lease: lease{state: leaseAvailable}}
		c.blobs[bname] = b
		i, _ := slices.BinarySearch(c.names, bname)
		c.names = slices.Insert(c.names, i, bname)
	}
	b.data = r.body
	b.meta = metadata(r.header)
	b.content = readContentProps(r.header)
	if b.content.md5 == nil {
		b.content.md5 = sum[:]
	}
	s.modify(r, b)
	rep := newReply(http.StatusCreated)
	rep.header.Set("ETag", b.etag)
	rep.header.Set("Last-Modified", rfc1123(b.modified))
	rep.header.Set("Content-Md5", base64.StdEncoding.EncodeToString(sum[:]))
	rep.header.Set("X-Ms-Request-Server-Encrypted", "true")
	return rep, nil
}

func (s *Server) setBlobMetadata(r *request, cname, bname string) (*reply, error) {
	_, b, err := s.writableBlob(r, cname, bname)
	if err != nil {
		return nil, err
	}
	b.meta = metadata(r.header)
	s.modify(r, b)
	rep := newReply(http.StatusOK)
	rep.header.Set("ETag", b.etag)
	rep.header.Set("Last-Modified", rfc1123(b.modified))
	rep.header.Set("X-Ms-Request-Server-Encrypted", "true")
	return rep, nil
}

func (s *Server) setBlobProperties(r *request, cname, bname string) (*reply, error) {
	_, b, err := s.writableBlob(r, cname, bname)
	if err != nil {
		return nil, err
	}
	p := readContentProps(r.header)
	if r.header.Get("X-Ms-Blob-Content-Type") == "" {
		p.typ = ""
	}
	b.content = p
	s.modify(r, b)
	rep := newReply(http.StatusOK)
	rep.header.Set("ETag", b.etag)
	rep.header.Set("Last-Modified", rfc1123(b.modified))
	return rep, nil
}

// parseRange reads a "bytes=a-b" or "bytes=a-" range of a blob of size n:
// ok false when there is none.
func parseRange(v string, n int) (from, to int, ok bool, err error) {
	if v == "" {
		return 0, 0, false, nil
	}
	spec, found := strings.CutPrefix(v, "bytes=")
	a, b, dash := strings.Cut(spec, "-")
	start, err1 := strconv.Atoi(a)
	if !found || !dash || err1 != nil || start < 0 {
		return 0, 0, false, fail(http.StatusBadRequest, "InvalidHeaderValue", "range %q", v)
	}
	end := n - 1
	if b != "" {
		e, err := strconv.Atoi(b)
		if err != nil || e < start {
			return 0, 0, false, fail(http.StatusBadRequest, "InvalidHeaderValue", "range %q", v)
		}
		end = min(e, n-1)
	}
	if start >= n {
		return 0, 0, false, fail(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The range specified is invalid for the current size of the resource.")
	}
	return start, end, true, nil
}

func (s *Server) getBlob(r *request, cname, bname string, withBody bool) (*reply, error) {
	_, b, err := s.existingBlob(r, cname, bname)
	if err != nil {
		return nil, err
	}
	if err := conditions(r, true, b.etag, b.modified, true); err != nil {
		return nil, err
	}
	if err := checkReadLease(r, b); err != nil {
		return nil, err
	}
	rep := newReply(http.StatusOK)
	h := rep.header
	h.Set("ETag", b.etag)
	h.Set("Last-Modified", rfc1123(b.modified))
	h.Set("X-Ms-Creation-Time", rfc1123(b.created))
	h.Set("X-Ms-Blob-Type", "BlockBlob")
	h.Set("X-Ms-Server-Encrypted", "true")
	h.Set("Accept-Ranges", "bytes")
	if b.content.typ != "" {
		h.Set("Content-Type", b.content.typ)
	}
	for k, v := range map[string]string{"Content-Encoding": b.content.encoding, "Content-Language": b.content.language, "Cache-Control": b.content.cache, "Content-Disposition": b.content.disposition} {
		if v != "" {
			h.Set(k, v)
		}
	}
	b.lease.headers(h)
	setMetadata(h, b.meta)
	if !withBody {
		h.Set("X-Ms-Access-Tier", "Hot")
		h.Set("X-Ms-Access-Tier-Inferred", "true")
		h.Set("Content-Length", strconv.Itoa(len(b.data)))
		if len(b.content.md5) > 0 {
			h.Set("Content-Md5", base64.StdEncoding.EncodeToString(b.content.md5))
		}
		return rep, nil
	}
	from, to, ranged, err := parseRange(cmp.Or(r.header.Get("X-Ms-Range"), r.header.Get("Range")), len(b.data))
	if err != nil {
		return nil, err
	}
	if ranged {
		rep.status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(b.data)))
		rep.body = b.data[from : to+1]
	} else {
		rep.body = b.data
		if len(b.content.md5) > 0 {
			h.Set("Content-Md5", base64.StdEncoding.EncodeToString(b.content.md5))
		}
	}
	return rep, nil
}

func (s *Server) deleteBlob(r *request, cname, bname string) (*reply, error) {
	c, _, err := s.writableBlob(r, cname, bname)
	if err != nil {
		return nil, err
	}
	delete(c.blobs, bname)
	if i, found := slices.BinarySearch(c.names, bname); found {
		c.names = slices.Delete(c.names, i, i+1)
	}
	rep := newReply(http.StatusAccepted)
	rep.header.Set("X-Ms-Delete-Type-Permanent", "true")
	return rep, nil
}

func errLeaseMismatch() error {
	return fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation", "The lease ID specified did not match the lease ID for the blob.")
}

func errLeaseNotPresent() error {
	return fail(http.StatusConflict, "LeaseNotPresentWithLeaseOperation", "There is currently no lease on the blob.")
}

// leaseBlob serves the five lease actions, with the outcomes of the Lease
// Blob documentation's state table. Lease operations change neither the
// blob's ETag nor its Last-Modified.
func (s *Server) leaseBlob(r *request, cname, bname string) (string, *reply, error) {
	action := strings.ToLower(r.header.Get("X-Ms-Lease-Action"))
	op := map[string]string{"acquire": "AcquireBlobLease", "renew": "RenewBlobLease", "change": "ChangeBlobLease", "release": "ReleaseBlobLease", "break": "BreakBlobLease"}[action]
	if op == "" {
		return "", nil, fail(http.StatusBadRequest, "InvalidHeaderValue", "x-ms-lease-action %q: want acquire, renew, change, release or break", action)
	}
	rep, err := s.leaseAction(r, cname, bname, action)
	return op, rep, err
}

func (s *Server) leaseAction(r *request, cname, bname, action string) (*reply, error) {
	_, b, err := s.existingBlob(r, cname, bname)
	if err != nil {
		return nil, err
	}
	if err := conditions(r, true, b.etag, b.modified, false); err != nil {
		return nil, err
	}
	id := r.header.Get("X-Ms-Lease-Id")
	proposed := r.header.Get("X-Ms-Proposed-Lease-Id")
	needID := func() error {
		if id == "" {
			return fail(http.StatusBadRequest, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is not specified: x-ms-lease-id.")
		}
		if !validGUID(id) {
			return fail(http.StatusBadRequest, "InvalidHeaderValue", "The value for one of the HTTP headers is not in the correct format: x-ms-lease-id.")
		}
		return nil
	}
	if proposed != "" && !validGUID(proposed) {
		return nil, fail(http.StatusBadRequest, "InvalidHeaderValue", "The value for one of the HTTP headers is not in the correct format: x-ms-proposed-lease-id.")
	}
	l := &b.lease
	rep := newReply(http.StatusOK)
	switch action {
	case "acquire":
		d, err := strconv.Atoi(r.header.Get("X-Ms-Lease-Duration"))
		if err != nil || d != -1 && (d < 15 || d > 60) {
			return nil, fail(http.StatusBadRequest, "InvalidHeaderValue", "The value for one of the HTTP headers is not in the correct format: x-ms-lease-duration (want -1 or 15 to 60).")
		}
		switch l.state {
		case leaseLeased:
			if proposed == "" || !sameLease(proposed, l.id) {
				return nil, fail(http.StatusConflict, "LeaseAlreadyPresent", "There is already a lease present.")
			}
		case leaseBreaking:
			if proposed != "" && sameLease(proposed, l.id) {
				return nil, fail(http.StatusConflict, "LeaseIsBreakingAndCannotBeAcquired", "There is already a breaking lease present.")
			}
			return nil, fail(http.StatusConflict, "LeaseAlreadyPresent", "There is already a lease present.")
		}
		if proposed == "" {
			proposed = idFrom(s.next())
		}
		*l = lease{state: leaseLeased, id: proposed, infinite: d == -1, duration: d}
		if d > 0 {
			l.expires = r.now.Add(time.Duration(d) * time.Second)
		}
		rep.status = http.StatusCreated
		rep.header.Set("X-Ms-Lease-Id", l.id)
	case "renew":
		if err := needID(); err != nil {
			return nil, err
		}
		switch {
		case l.state == leaseAvailable || !sameLease(id, l.id):
			return nil, errLeaseMismatch()
		case l.state == leaseBreaking || l.state == leaseBroken:
			return nil, fail(http.StatusConflict, "LeaseIsBrokenAndCannotBeRenewed", "The lease ID matched, but the lease has been broken explicitly and cannot be renewed.")
		}
		// Leased, or expired and neither written nor leased since.
		l.state = leaseLeased
		if !l.infinite {
			l.expires = r.now.Add(time.Duration(l.duration) * time.Second)
		}
		rep.header.Set("X-Ms-Lease-Id", l.id)
	case "change":
		if err := needID(); err != nil {
			return nil, err
		}
		if proposed == "" {
			return nil, fail(http.StatusBadRequest, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is not specified: x-ms-proposed-lease-id.")
		}
		switch l.state {
		case leaseAvailable, leaseExpired, leaseBroken:
			return nil, errLeaseNotPresent()
		case leaseBreaking:
			if sameLease(id, l.id) || sameLease(proposed, l.id) {
				return nil, fail(http.StatusConflict, "LeaseIsBreakingAndCannotBeChanged", "The lease ID matched, but the lease is currently in breaking state and cannot be changed.")
			}
			return nil, errLeaseMismatch()
		}
		if !sameLease(id, l.id) && !sameLease(proposed, l.id) {
			return nil, errLeaseMismatch()
		}
		l.id = proposed
		rep.header.Set("X-Ms-Lease-Id", l.id)
	case "release":
		if err := needID(); err != nil {
			return nil, err
		}
		if l.state == leaseAvailable || !sameLease(id, l.id) {
			return nil, errLeaseMismatch()
		}
		*l = lease{state: leaseAvailable}
	case "break":
		period := -1
		if v := r.header.Get("X-Ms-Lease-Break-Period"); v != "" {
			p, err := strconv.Atoi(v)
			if err != nil || p < 0 || p > 60 {
				return nil, fail(http.StatusBadRequest, "InvalidHeaderValue", "The value for one of the HTTP headers is not in the correct format: x-ms-lease-break-period (want 0 to 60).")
			}
			period = p
		}
		switch l.state {
		case leaseAvailable:
			return nil, errLeaseNotPresent()
		case leaseExpired, leaseBroken:
			l.state = leaseBroken
		case leaseLeased:
			switch {
			case period == 0 || l.infinite && period < 0:
				l.state = leaseBroken
			case period < 0:
				l.state, l.breakAt = leaseBreaking, l.expires
			default:
				at := r.now.Add(time.Duration(period) * time.Second)
				if !l.infinite && l.expires.Before(at) {
					at = l.expires
				}
				l.state, l.breakAt = leaseBreaking, at
			}
		case leaseBreaking:
			switch {
			case period == 0:
				l.state = leaseBroken
			case period > 0:
				if at := r.now.Add(time.Duration(period) * time.Second); at.Before(l.breakAt) {
					l.breakAt = at
				}
			}
		}
		l.settle(r.now)
		remaining := 0
		if l.state == leaseBreaking {
			remaining = int((l.breakAt.Sub(r.now) + time.Second - 1) / time.Second)
		}
		rep.status = http.StatusAccepted
		rep.header.Set("X-Ms-Lease-Time", strconv.Itoa(remaining))
	}
	rep.header.Set("ETag", b.etag)
	rep.header.Set("Last-Modified", rfc1123(b.modified))
	return rep, nil
}
