"""The client of the leasecron HTTP API (``/api/v1``)."""

from __future__ import annotations

import datetime as _dt
import email.utils
import http.client
import json
import logging
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._convert import format_duration, format_time, task_spec
from .errors import ApiError, error_from_response

try:
    import ssl
except ImportError:  # pragma: no cover - Python built without ssl
    ssl = None  # type: ignore[assignment]

__all__ = ["Client", "USER_AGENT", "parse_retry_after"]

__version__ = "0.1.0"

#: The User-Agent of every request.
USER_AGENT = f"leasecron-python/{__version__}"

#: The run states :meth:`Client.wait` stops at by default.
FINAL_STATES = ("succeeded", "dead", "cancelled")

# Statuses retried (with Retry-After honoured).
_RETRY_STATUSES = frozenset({429, 503})
# Methods safe to send again after a connection error or a timeout.
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_API_PREFIX = "/api/v1"
# Largest exponent of the backoff (keeps 2**n a sane float).
_MAX_EXPONENT = 32

log = logging.getLogger("leasecron_client")

_NO_BODY = object()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: urllib would carry the Authorization header along."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        """Return None, so the 3xx answer is raised as an error."""
        return None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Return the seconds a ``Retry-After`` header value asks to wait.

    value is integer (or decimal) seconds or an HTTP date; None, or a value
    that is neither, gives None. A date in the past gives 0. now is the
    current POSIX time (default: ``time.time()``).
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if seconds == seconds else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    if now is None:
        now = time.time()
    return max(0.0, when.timestamp() - now)


def _segment(value: str) -> str:
    """Return value escaped as one path segment."""
    if not isinstance(value, str) or not value:
        raise ValueError("an id must be a non-empty str")
    return urllib.parse.quote(value, safe="")


def _query_value(value: Any) -> Any:
    """Return a query parameter value as the server reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return [_query_value(v) for v in value]
    return value


def _is_timeout(exc: BaseException) -> bool:
    """Report whether exc is (or wraps) a socket timeout."""
    if isinstance(exc, TimeoutError):
        return True
    return isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, TimeoutError)


def _is_certificate_error(exc: BaseException) -> bool:
    """Report whether exc is (or wraps) a TLS certificate failure."""
    if ssl is None:
        return False
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, ssl.SSLCertVerificationError)


class Client:
    """A client of the leasecron HTTP API.

    Args:
        base_url: the server, e.g. ``http://localhost:8080`` (``/api/v1`` is
            added unless the URL already ends with it).
        token: the API token (``lct.NAME.SECRET``), sent as a bearer token;
            it is never shown by ``repr`` or in error messages.
        timeout: seconds each HTTP request may wait on the network.
        retries: how many times a request is sent again after a 429 or 503
            answer, or, when it is idempotent, a connection error or timeout.
        backoff: the first backoff in seconds when no ``Retry-After`` is
            given; it doubles with each retry, with jitter.
        max_backoff: the cap of the backoff in seconds.

    The client keeps no connection open and may be shared by threads.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ) -> None:
        """Make a client of the API at base_url that authenticates with token."""
        if not isinstance(base_url, str) or not base_url.strip():
            raise ValueError("base_url must be a non-empty URL")
        parts = urllib.parse.urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("base_url must be an http:// or https:// URL")
        if not isinstance(token, str) or not token.strip():
            raise ValueError("token must be a non-empty str")
        token = token.strip()
        if any(c in token for c in "\r\n\0") or not token.isprintable():
            raise ValueError("token has characters not allowed in a header")
        if timeout is None or timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError("retries must be an int >= 0")
        if backoff < 0 or max_backoff < 0:
            raise ValueError("backoff and max_backoff must be >= 0")
        path = parts.path.rstrip("/")
        if not path.endswith(_API_PREFIX):
            path += _API_PREFIX
        self.base_url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.__token = token
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        """Show the client without its token."""
        return f"{type(self).__name__}(base_url={self.base_url!r}, token='***')"

    # -- tasks ---------------------------------------------------------

    def schedule(
        self,
        type: str,
        payload: Any = None,
        *,
        id: str | None = None,
        at: str | _dt.datetime | None = None,
        in_: str | _dt.timedelta | None = None,
        every: str | _dt.timedelta | None = None,
        cron: str | None = None,
        tz: str | None = None,
        max_attempts: int | None = None,
        queue: str | None = None,
        priority: int | str | None = None,
        fair_key: str | None = None,
        unique_key: str | None = None,
        unique_for: str | _dt.timedelta | None = None,
        unique_states: str | Iterable[str] | None = None,
        after: Iterable[str] | None = None,
        after_any: bool | None = None,
        traceparent: str | None = None,
    ) -> dict[str, Any]:
        """Schedule a task (``POST /tasks``) and return the ``Task``.

        payload is any JSON-able value: a str is the payload text, anything
        else its compact JSON. at is a datetime or RFC 3339 string; in_,
        every and unique_for are Go duration strings (``"90s"``) or
        timedeltas. Only the arguments that are not None are sent. With an
        id, a repeated identical POST answers as the first while the task is
        pending; but a task due now may have run by the time a resend
        arrives, and the resend would schedule it again, so a connection
        error or timeout is raised, not retried: :meth:`status` tells
        whether the task was scheduled.

        Raises:
            Invalid: a field is wrong (``field`` names it).
            UniqueKeyHeld: the unique key is held (``holder`` names the task).
            Conflict: the id is taken by a different task.
        """
        spec = task_spec(
            {
                "id": id,
                "type": type,
                "payload": payload,
                "at": at,
                "in": in_,
                "every": every,
                "cron": cron,
                "tz": tz,
                "max_attempts": max_attempts,
                "queue": queue,
                "priority": priority,
                "fair_key": fair_key,
                "unique_key": unique_key,
                "unique_for": unique_for,
                "unique_states": unique_states,
                "after": after,
                "after_any": after_any,
            }
        )
        answer = self.request(
            "POST",
            "/tasks",
            spec,
            headers=_trace_headers(traceparent),
            idempotent=False,
        )
        return _task_of(answer)

    def schedule_many(
        self,
        tasks: Sequence[Mapping[str, Any]],
        *,
        partial: bool = False,
        batch: str | None = None,
        on_complete: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> dict[str, Any]:
        """Schedule many tasks in one request (``POST /tasks:many``).

        Each entry of tasks is a task spec with the JSON field names
        (``in_`` is accepted for ``in``; times and durations are converted
        as for :meth:`schedule`; None values are dropped). With partial the
        valid tasks are scheduled even when others are not; batch names the
        batch, and on_complete (``{"type": T, "payload": P}``) is the task
        scheduled when the batch completes.

        Returns the whole answer: ``scheduled``, ``batch`` and ``results``
        (``{index, id, status, due, error, holder}`` per task).

        Raises:
            Invalid: 422 ``invalid-tasks`` without partial (``errors`` lists
                them; nothing was scheduled), or 413 for too many tasks.
        """
        if isinstance(tasks, Mapping):
            raise TypeError("tasks must be a list of task specs")
        specs = [task_spec(t) for t in tasks]
        body: dict[str, Any] = {"tasks": specs}
        if partial:
            body["partial"] = True
        if batch is not None:
            body["batch"] = batch
        if on_complete is not None:
            body["on_complete"] = dict(on_complete)
        # A batch's first call seals it: a resend is answered as the first
        # even once its tasks ran. Without a batch, a task that ran since
        # would be scheduled again (see schedule).
        idempotent = bool(batch) and bool(specs) and all(
            isinstance(s.get("id"), str) and s["id"] for s in specs
        )
        return self.request(
            "POST",
            "/tasks:many",
            body,
            headers=_trace_headers(traceparent),
            idempotent=idempotent,
        )

    def status(self, id: str) -> dict[str, Any]:
        """Return the task status (``GET /tasks/{id}``).

        The answer has ``id``, ``state`` and, when they exist, ``task`` (the
        pending Task) and ``run`` (its latest Run).

        Raises:
            NotFound: there is neither a task nor a run of that id.
        """
        return self.request("GET", f"/tasks/{_segment(id)}")

    def cancel(self, id: str) -> dict[str, Any]:
        """Cancel a task (``POST /tasks/{id}/cancel``).

        Returns ``{"id", "removed", "marked"}``.

        Raises:
            NotFound: nothing of that id was there.
        """
        return self.request("POST", f"/tasks/{_segment(id)}/cancel")

    def reschedule(
        self,
        id: str,
        *,
        at: str | _dt.datetime | None = None,
        in_: str | _dt.timedelta | None = None,
    ) -> dict[str, Any]:
        """Move a pending task to at, or in_ from now, and return the ``Task``.

        (``POST /tasks/{id}/reschedule``.) at is a datetime or RFC 3339
        string, in_ a Go duration string or timedelta.
        """
        body = task_spec({"at": at, "in": in_})
        answer = self.request("POST", f"/tasks/{_segment(id)}/reschedule", body)
        return _task_of(answer)

    def replace(self, id: str, **spec: Any) -> dict[str, Any]:
        """Replace the pending task id, or schedule it, and return the ``Task``.

        (``PUT /tasks/{id}``.) spec takes the keyword arguments of
        :meth:`schedule` (``type``, ``payload``, ``at``, ``in_``, ...,
        ``traceparent``); its ``id``, if given, must be id. A connection
        error or timeout is raised, not retried: a task due now may have run
        since, and a resend would schedule it again (see :meth:`schedule`).
        """
        traceparent = spec.pop("traceparent", None)
        answer = self.request(
            "PUT",
            f"/tasks/{_segment(id)}",
            task_spec(spec),
            headers=_trace_headers(traceparent),
            idempotent=False,
        )
        return _task_of(answer)

    def wait(
        self,
        id: str,
        timeout: float = 60.0,
        poll: float = 0.5,
        states: Iterable[str] = FINAL_STATES,
    ) -> dict[str, Any]:
        """Poll the status of id until its run's state is one of states.

        Returns that status (as :meth:`status`). Polls every poll seconds.

        Raises:
            TimeoutError: the state was not reached within timeout seconds.
            NotFound: the task and its run do not exist.
        """
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        while True:
            answer = self.status(id)
            state = _run_state(answer)
            if state in wanted:
                return answer
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"task {id!r} was {state or 'without a run'} after {timeout:g}s, "
                    f"not one of {', '.join(sorted(wanted))}"
                )
            time.sleep(min(max(poll, 0.0), left))

    # -- other reads ---------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Return the ``Health`` of the scheduler (``GET /health``)."""
        return self.request("GET", "/health")

    def runs(self, **query: Any) -> dict[str, Any]:
        """List runs (``GET /runs``): ``{"runs": [Run], "continue"}``.

        query takes ``state``, ``type``, ``series``, ``batch``, ``limit``
        and ``continue`` (also spelt ``continue_``); None values are left
        out. Pass the answer's ``continue`` to get the next page.
        """
        if "continue_" in query:
            query["continue"] = query.pop("continue_")
        return self.request("GET", "/runs", query=query)

    def batch(self, id: str) -> dict[str, Any]:
        """Return the ``BatchStatus`` of batch id (``GET /batches/{id}``).

        Raises:
            NotFound: there is no such batch.
        """
        return self.request("GET", f"/batches/{_segment(id)}")

    def start_bulk(
        self,
        kind: str,
        *,
        expect: int,
        id: str | None = None,
        type: str | None = None,
        reason: str | None = None,
        id_prefix: str | None = None,
        queue: str | None = None,
        since: str | _dt.datetime | _dt.timedelta | None = None,
        until: str | _dt.datetime | _dt.timedelta | None = None,
    ) -> dict[str, Any]:
        """Start a bulk operation (``POST /bulk``, role operator); return the ``Bulk``.

        kind is ``requeue-dead``, ``cancel-pending`` or ``disable-series``;
        type, reason, id_prefix and queue filter what it acts on, and since
        and until (``requeue-dead``) the due times of the dead tasks: a
        datetime or RFC 3339 string, or a timedelta or Go duration string
        before now (``"24h"``). expect is how many items you confirmed
        match; the server refuses when the count differs.

        id names the operation (``bulk-`` and up to 95 letters, digits,
        ``-``, ``_`` or ``.``). Without one the client draws one
        (``bulk-`` and a UUID), so the request is retried as a GET is: a
        resend finds the operation the first send started and starts
        nothing. Follow it with :meth:`bulk`.

        Raises:
            Conflict: the matching count differs from expect (count
                again), or id names another operation, or one whose own
                start failed before it ran (start it with another id).
            Invalid: a bad kind, filter, time or id (``field`` names it).
        """

        def when(value: str | _dt.datetime | _dt.timedelta | None) -> str | None:
            if value is None or isinstance(value, str):
                return value
            if isinstance(value, _dt.timedelta):
                return format_duration(value)
            return format_time(value)

        body: dict[str, Any] = {
            # An empty id is none to the server, which would draw one of
            # its own: a resend would then start a second operation.
            "id": id or f"bulk-{uuid.uuid4()}",
            "kind": kind,
            "type": type,
            "reason": reason,
            "id_prefix": id_prefix,
            "queue": queue,
            "since": when(since),
            "until": when(until),
            "expect": expect,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return self.request("POST", "/bulk", body, idempotent=True)

    def bulk(self, id: str) -> dict[str, Any]:
        """Return the ``Bulk`` operation id and its progress (``GET /bulk/{id}``).

        Raises:
            NotFound: there is no such operation.
        """
        return self.request("GET", f"/bulk/{_segment(id)}")

    def bulks(self) -> dict[str, Any]:
        """List the bulk operations kept, newest first (``GET /bulk``): ``{"operations": [Bulk]}``."""
        return self.request("GET", "/bulk")

    # -- transport -----------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = _NO_BODY,
        *,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        """Send a request to the API and return its decoded JSON answer.

        The low-level call the other methods use, for routes they do not
        cover. path is relative to ``/api/v1`` (e.g. ``"/paused"``); body,
        when given, is sent as JSON; query values that are None are left
        out. 429 and 503 answers are retried; connection errors and timeouts
        are retried when idempotent (default: for GET, HEAD, PUT, DELETE
        and OPTIONS).

        Raises:
            ApiError: (a subclass of) for an answer that is not 2xx.
            TimeoutError: no answer within the timeout, after the retries.
            ConnectionError: the server could not be reached, after the
                retries.
        """
        method = method.upper()
        url = self.base_url + path
        if query:
            params = {k: _query_value(v) for k, v in query.items() if v is not None}
            if params:
                url += "?" + urllib.parse.urlencode(params, doseq=True)
        data = None
        if body is not _NO_BODY:
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        if idempotent is None:
            idempotent = method in _IDEMPOTENT_METHODS
        attempt = 0
        while True:
            try:
                return self._send(method, url, data, headers)
            except ApiError as err:
                if err.status not in _RETRY_STATUSES or attempt >= self.retries:
                    raise
                delay = err.retry_after
                if delay is None:
                    delay = self._backoff(attempt)
                reason = f"HTTP {err.status}"
            except (OSError, http.client.HTTPException) as exc:
                timed_out = _is_timeout(exc)
                if not idempotent or attempt >= self.retries or _is_certificate_error(exc):
                    raise _transport_error(method, url, exc, timed_out, self.timeout) from exc
                delay = self._backoff(attempt)
                reason = "timeout" if timed_out else type(exc).__name__
            attempt += 1
            log.debug(
                "%s %s: %s, retry %d of %d in %.2fs",
                method, path, reason, attempt, self.retries, delay,
            )
            time.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        """Return the backoff before retry attempt+1: exponential, jittered."""
        cap = min(self.max_backoff, self.backoff * 2 ** min(attempt, _MAX_EXPONENT))
        return cap / 2 + random.uniform(0, cap / 2)

    def _send(
        self,
        method: str,
        url: str,
        data: bytes | None,
        extra: Mapping[str, str] | None,
    ) -> Any:
        """Send one request; return its decoded answer or raise ApiError."""
        headers = {
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            "Authorization": "Bearer " + self.__token,
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        if extra:
            headers.update(extra)
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                status = resp.status
                raw = resp.read()
        except urllib.error.HTTPError as err:
            try:
                raw = err.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                err.close()
            hdrs = err.headers
            raise error_from_response(
                err.code,
                raw or b"",
                retry_after=parse_retry_after(hdrs.get("Retry-After") if hdrs else None),
                location=hdrs.get("Location") if hdrs else None,
            ) from None
        if not raw.strip():
            return {}
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError:
            snippet = raw[:200].decode("utf-8", "replace")
            raise ApiError(status, detail=f"the answer is not JSON: {snippet!r}") from None


def _transport_error(
    method: str, url: str, exc: BaseException, timed_out: bool, timeout: float
) -> OSError:
    """Return the TimeoutError or ConnectionError to raise for exc."""
    if timed_out:
        return TimeoutError(f"{method} {url}: no answer within {timeout:g}s")
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return ConnectionError(f"{method} {url}: {type(reason).__name__}: {reason}")


def _trace_headers(traceparent: str | None) -> dict[str, str] | None:
    """Return the headers carrying traceparent, if any."""
    return {"traceparent": traceparent} if traceparent else None


def _task_of(answer: Any) -> Any:
    """Return the ``task`` of an answer ``{"task": Task}``."""
    if isinstance(answer, dict) and "task" in answer:
        return answer["task"]
    return answer


def _run_state(answer: Any) -> str | None:
    """Return the state of the run in a status answer (else its state)."""
    if not isinstance(answer, dict):
        return None
    run = answer.get("run")
    if isinstance(run, dict) and run.get("state"):
        return run["state"]
    return answer.get("state")

