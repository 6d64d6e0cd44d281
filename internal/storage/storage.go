// Package storage builds the Azure Storage clients leasecron uses and is the
// one boundary where Azure error codes are translated into sentinel errors.
// Nothing above this package inspects HTTP status codes.
package storage

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/leasecrontype"
)

// Config says how to reach one storage account. Either ConnectionString or
// Account (with Azure AD credentials) must be set.
type Config struct {
	// ConnectionString is a storage connection string (AccountName and
	// AccountKey, optionally explicit BlobEndpoint/QueueEndpoint/TableEndpoint,
	// or UseDevelopmentStorage=true).
	ConnectionString string
	// Account is the storage account name, used with Azure AD credentials
	// when ConnectionString is empty.
	Account string
	// BlobURL, QueueURL and TableURL override the service endpoints derived
	// from Account (https://{account}.{blob|queue|table}.core.windows.net/).
	BlobURL, QueueURL, TableURL string
	// Credential is the Azure AD credential used with Account. Nil means
	// azidentity.NewDefaultAzureCredential (managed identity, workload
	// identity, Azure CLI, environment).
	Credential azcore.TokenCredential
	// TryTimeout bounds one HTTP attempt. Default 10 s.
	TryTimeout time.Duration
	// MaxRetries is how often a failed request is retried by the SDK.
	// Default 2 (callers with tighter deadlines pass a context deadline).
	MaxRetries int32
	// Counter, when set, counts every request by operation and status.
	Counter *Counter
	// Transport, when set, replaces the HTTP transport (tests, proxies).
	Transport policy.Transporter
}

// Clients holds one service client per storage service of an account.
type Clients struct {
	// Account is the account name.
	Account string
	// Blob is the blob service client.
	Blob *service.Client
	// Queue is the queue service client.
	Queue *azqueue.ServiceClient
	// Table is the table service client.
	Table *aztables.ServiceClient
}

// defaultTransport keeps enough idle connections per host for the mover's
// concurrent enqueues (32 by default) and a busy consumer: the SDK's default
// keeps 10, so the rest would reconnect (and, against Azure, renegotiate
// TLS) on every burst.
var defaultTransport = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t}
}()

// ErrNoAccount is returned when a Config names neither a connection string nor an account.
var ErrNoAccount = errors.New("no storage account configured: set storage.connection_string (or AZURE_STORAGE_CONNECTION_STRING) or storage.account")

// New builds the clients described by cfg. It does not contact the service.
func New(cfg Config) (*Clients, error) {
	if cfg.TryTimeout <= 0 {
		cfg.TryTimeout = 10 * time.Second
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 2
	}
	if cfg.Transport == nil {
		cfg.Transport = defaultTransport
	}
	co := func(svc string) policy.ClientOptions {
		o := policy.ClientOptions{
			Retry: policy.RetryOptions{
				MaxRetries:    cfg.MaxRetries,
				TryTimeout:    cfg.TryTimeout,
				RetryDelay:    200 * time.Millisecond,
				MaxRetryDelay: 2 * time.Second,
			},
			Telemetry: policy.TelemetryOptions{ApplicationID: "leasecron"},
		}
		if cfg.Counter != nil {
			o.PerCallPolicies = []policy.Policy{cfg.Counter.policy(svc)}
		}
		if cfg.Transport != nil {
			o.Transport = cfg.Transport
		}
		return o
	}
	c := &Clients{}
	switch {
	case cfg.ConnectionString != "":
		cs, err := ParseConnectionString(cfg.ConnectionString)
		if err != nil {
			return nil, err
		}
		c.Account = cs.AccountName
		bk, err := service.NewSharedKeyCredential(cs.AccountName, cs.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("storage connection string: account key: %w", err)
		}
		if c.Blob, err = service.NewClientWithSharedKeyCredential(cs.BlobEndpoint, bk, &service.ClientOptions{ClientOptions: co("blob")}); err != nil {
			return nil, fmt.Errorf("blob client: %w", err)
		}
		qk, err := azqueue.NewSharedKeyCredential(cs.AccountName, cs.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("storage connection string: account key: %w", err)
		}
		if c.Queue, err = azqueue.NewServiceClientWithSharedKeyCredential(cs.QueueEndpoint, qk, &azqueue.ClientOptions{ClientOptions: co("queue")}); err != nil {
			return nil, fmt.Errorf("queue client: %w", err)
		}
		tk, err := aztables.NewSharedKeyCredential(cs.AccountName, cs.AccountKey)
		if err != nil {
			return nil, fmt.Errorf("storage connection string: account key: %w", err)
		}
		if c.Table, err = aztables.NewServiceClientWithSharedKey(cs.TableEndpoint, tk, &aztables.ClientOptions{ClientOptions: co("table")}); err != nil {
			return nil, fmt.Errorf("table client: %w", err)
		}
	case cfg.Account != "" || cfg.BlobURL != "":
		cred := cfg.Credential
		if cred == nil {
			var err error
			if cred, err = azidentity.NewDefaultAzureCredential(nil); err != nil {
				return nil, fmt.Errorf("azure AD credential for storage account %q: %w", cfg.Account, err)
			}
		}
		c.Account = cfg.Account
		endpoint := func(override, svc string) (string, error) {
			if override != "" {
				return override, nil
			}
			if cfg.Account == "" {
				return "", fmt.Errorf("storage.%s_url is empty and storage.account is not set", svc)
			}
			if err := ValidateAccountName(cfg.Account); err != nil {
				return "", err
			}
			return fmt.Sprintf("https://%s.%s.core.windows.net/", cfg.Account, svc), nil
		}
		u, err := endpoint(cfg.BlobURL, "blob")
		if err != nil {
			return nil, err
		}
		if c.Blob, err = service.NewClient(u, cred, &service.ClientOptions{ClientOptions: co("blob")}); err != nil {
			return nil, fmt.Errorf("blob client: %w", err)
		}
		if u, err = endpoint(cfg.QueueURL, "queue"); err != nil {
			return nil, err
		}
		if c.Queue, err = azqueue.NewServiceClient(u, cred, &azqueue.ClientOptions{ClientOptions: co("queue")}); err != nil {
			return nil, fmt.Errorf("queue client: %w", err)
		}
		if u, err = endpoint(cfg.TableURL, "table"); err != nil {
			return nil, err
		}
		if c.Table, err = aztables.NewServiceClient(u, cred, &aztables.ClientOptions{ClientOptions: co("table")}); err != nil {
			return nil, fmt.Errorf("table client: %w", err)
		}
	default:
		return nil, ErrNoAccount
	}
	return c, nil
}

// Sentinel errors produced by Translate. Callers branch on them with errors.Is.
var (
	// ErrNotFound: the blob, entity, message, table, queue or container does not exist.
	// It is leasecrontype.ErrNotFound, the one every package wraps.
	ErrNotFound = leasecrontype.ErrNotFound
	// ErrTableNotFound: the table itself does not exist (yet). It wraps
	// ErrNotFound, so callers that do not care which is missing need not
	// tell them apart.
	ErrTableNotFound = fmt.Errorf("table %w", ErrNotFound)
	// ErrAlreadyExists: a conditional create found the resource already there.
	ErrAlreadyExists = errors.New("already exists")
	// ErrPreconditionFailed: an If-Match / If-None-Match condition failed
	// (the ETag changed since it was read). It is the public
	// leasecrontype.ErrPreconditionFailed.
	ErrPreconditionFailed = leasecrontype.ErrPreconditionFailed
	// ErrLeaseConflict: a lease operation was refused (already leased, lease
	// ID mismatch, lease lost or expired). It is the public
	// leasecrontype.ErrLeaseConflict.
	ErrLeaseConflict = leasecrontype.ErrLeaseConflict
	// ErrAuth: the service rejected the credentials.
	ErrAuth = errors.New("storage authentication failed")
	// ErrBadRequest: the service rejected the request as invalid (bad name,
	// property too large, malformed input).
	ErrBadRequest = errors.New("rejected by storage service")
	// ErrServerBusy: the service is throttling (503 ServerBusy, 500
	// OperationTimedOut, 429) or failed on its side (5xx); the request may
	// be tried again later, after RetryAfter when it says. It is the public
	// leasecrontype.ErrServerBusy.
	ErrServerBusy = leasecrontype.ErrServerBusy
)

// Translate maps an Azure SDK error to one of the sentinel errors, keeping
// the original error in the chain. Errors it does not recognise, and nil,
// are returned unchanged.
func Translate(err error) error {
	if err == nil {
		return nil
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return err
	}
	code := re.ErrorCode
	status := re.StatusCode
	if status == http.StatusAccepted {
		// A table transaction reports the failing operation inside a
		// multipart body with an outer 202; the SDK puts that body into the
		// error text.
		msg := err.Error()
		switch {
		case strings.Contains(msg, "UpdateConditionNotSatisfied") || strings.Contains(msg, " 412 "):
			return fmt.Errorf("%w: %w", ErrPreconditionFailed, err)
		case strings.Contains(msg, "EntityAlreadyExists") || strings.Contains(msg, " 409 "):
			return fmt.Errorf("%w: %w", ErrAlreadyExists, err)
		case strings.Contains(msg, "TableNotFound"):
			return fmt.Errorf("%w: %w", ErrTableNotFound, err)
		case strings.Contains(msg, "ResourceNotFound") || strings.Contains(msg, " 404 "):
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	switch {
	case strings.HasPrefix(code, "Lease") || code == "LeaseAlreadyPresent" || code == "LeaseIdMismatchWithLeaseOperation":
		return fmt.Errorf("%w: %w", ErrLeaseConflict, err)
	case code == "TableNotFound":
		return fmt.Errorf("%w: %w", ErrTableNotFound, err)
	case status == http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case status == http.StatusPreconditionFailed || code == "UpdateConditionNotSatisfied" || code == "ConditionNotMet":
		return fmt.Errorf("%w: %w", ErrPreconditionFailed, err)
	case status == http.StatusConflict:
		return fmt.Errorf("%w: %w", ErrAlreadyExists, err)
	case status == http.StatusForbidden || status == http.StatusUnauthorized:
		return fmt.Errorf("%w: %w", ErrAuth, err)
	case status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	case status >= 500 || status == http.StatusTooManyRequests || code == "ServerBusy" || code == "OperationTimedOut":
		return fmt.Errorf("%w: %w", ErrServerBusy, err)
	}
	return err
}

// RetryAfter is how long the service asked the caller to wait before trying
// again (Retry-After, or x-ms-retry-after-ms), or 0 when err carries no such
// answer.
func RetryAfter(err error) time.Duration {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.RawResponse == nil {
		return 0
	}
	h := re.RawResponse.Header
	if ms, perr := strconv.ParseInt(h.Get("x-ms-retry-after-ms"), 10, 64); perr == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, perr := strconv.ParseInt(v, 10, 64); perr == nil && s > 0 {
			return time.Duration(s) * time.Second
		}
		if t, perr := http.ParseTime(v); perr == nil {
			return max(0, time.Until(t))
		}
	}
	return 0
}

// Unprocessed reports whether err ends in the service's answer that it
// did not act on the request (503 ServerBusy, 429). That is the last try
// only: an earlier try of the same request, timed out, may have been
// made. A timeout, a lost connection or a 500 OperationTimedOut says
// nothing of the kind.
func Unprocessed(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && (re.StatusCode == http.StatusServiceUnavailable || re.StatusCode == http.StatusTooManyRequests)
}

// IsTransient reports whether err is worth retrying later: timeouts,
// connection failures, throttling and server errors. Refusals (not found,
// precondition, lease conflict, auth, bad request) are not transient.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrAlreadyExists) || errors.Is(err, ErrPreconditionFailed) ||
		errors.Is(err, ErrLeaseConflict) || errors.Is(err, ErrAuth) || errors.Is(err, ErrBadRequest) {
		return false
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests || re.StatusCode == http.StatusRequestTimeout
	}
	return true
}
