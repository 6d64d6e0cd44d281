"""Tests of leasecron_client against a scripted local HTTP server."""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import sys
import threading
import time
import unittest
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import leasecron_client  # noqa: E402
from leasecron_client import (  # noqa: E402
    ApiError,
    Client,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Unauthorized,
    UniqueKeyHeld,
    format_duration,
    format_time,
    parse_retry_after,
)

# Requests to 127.0.0.1 must not go through a proxy of the environment.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "*"

TOKEN = "lct.my-service.s3cr3t-VALUE-that-must-not-leak"
TASK = {"id": "t1", "type": "email.send", "due": "2030-01-02T03:04:05Z"}


@dataclass
class Reply:
    """A scripted answer of the fake server."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False


@dataclass
class Seen:
    """A request the fake server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        """Return the body decoded as JSON."""
        return json.loads(self.body)


class _Server(ThreadingHTTPServer):
    """A threading server that does not wait for handlers when closed."""

    block_on_close = False
    daemon_threads = True


class FakeServer:
    """An HTTP server on 127.0.0.1 answering from a script of Replies."""

    def __init__(self) -> None:
        """Start the server in a thread."""
        self.seen: list[Seen] = []
        self.script: list[Reply | Callable[[Seen], Reply]] = []
        self.default: Reply | Callable[[Seen], Reply] = Reply(200, {})
        self._lock = threading.Lock()
        self.httpd = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        """The server's base URL."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        """Stop the server."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(2)

    def _next(self, seen: Seen) -> Reply:
        """Record seen and return the reply to it."""
        with self._lock:
            self.seen.append(seen)
            reply = self.script.pop(0) if self.script else self.default
        return reply(seen) if callable(reply) else reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        """Return the request handler class bound to this server."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            """Answer every request from the server's script."""

            def _handle(self) -> None:
                """Record the request and write the scripted reply."""
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = Seen(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                    time.monotonic(),
                )
                reply = server._next(seen)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.drop:
                    self.close_connection = True
                    return
                if isinstance(reply.body, (bytes, str)):
                    raw = reply.body if isinstance(reply.body, bytes) else reply.body.encode()
                    ctype = "text/plain; charset=utf-8"
                elif reply.body is None:
                    raw, ctype = b"", "application/json"
                else:
                    raw = json.dumps(reply.body).encode()
                    ctype = "application/json"
                    if reply.status >= 400:
                        ctype = "application/problem+json"
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(raw)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_PUT = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                """Keep the test output quiet."""

        return Handler


def problem(
    status: int,
    kind: str,
    detail: str = "",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Reply:
    """Return a problem+json Reply of type urn:leasecron:problem:kind."""
    body = {"type": "urn:leasecron:problem:" + kind, "title": kind, "status": status}
    if detail:
        body["detail"] = detail
    body.update(extra)
    return Reply(status, body, dict(headers or {}))


class ServerTestCase(unittest.TestCase):
    """A test with a FakeServer and a helper to make clients of it."""

    def setUp(self) -> None:
        """Start the fake server."""
        self.server = FakeServer()
        self.addCleanup(self.server.close)

    def client(self, **kw: Any) -> Client:
        """Return a client of the fake server with fast defaults."""
        kw.setdefault("timeout", 2.0)
        kw.setdefault("retries", 3)
        kw.setdefault("backoff", 0.01)
        kw.setdefault("max_backoff", 0.05)
        return Client(self.server.url, TOKEN, **kw)

    def assertCommonHeaders(self, seen: Seen, body: bool) -> None:
        """Check the headers every request carries."""
        self.assertEqual(seen.headers["authorization"], "Bearer " + TOKEN)
        self.assertEqual(seen.headers["accept"], "application/json")
        self.assertEqual(seen.headers["user-agent"], "leasecron-python/0.1.0")
        if body:
            self.assertEqual(seen.headers["content-type"], "application/json")
        else:
            self.assertNotIn("content-type", seen.headers)
            self.assertEqual(seen.body, b"")


class RequestTests(ServerTestCase):
    """What each method sends and returns."""

    def test_schedule(self) -> None:
        """schedule POSTs /tasks with the converted spec and the trace header."""
        self.server.script = [Reply(201, {"task": TASK})]
        at = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
        task = self.client().schedule(
            "email.send",
            {"to": "a@example.com"},
            id="t1",
            at=at,
            max_attempts=3,
            queue="mail",
            priority="high",
            unique_key="k",
            unique_for=dt.timedelta(minutes=10),
            unique_states=["scheduled", "running"],
            after=("a", "b"),
            after_any=False,
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        self.assertEqual(task, TASK)
        (seen,) = self.server.seen
        self.assertEqual((seen.method, seen.path), ("POST", "/api/v1/tasks"))
        self.assertCommonHeaders(seen, body=True)
        self.assertEqual(
            seen.headers["traceparent"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        )
        self.assertEqual(
            seen.json(),
            {
                "id": "t1",
                "type": "email.send",
                "payload": {"to": "a@example.com"},
                "at": "2030-01-02T03:04:05Z",
                "max_attempts": 3,
                "queue": "mail",
                "priority": "high",
                "unique_key": "k",
                "unique_for": "10m0s",
                "unique_states": "scheduled,running",
                "after": ["a", "b"],
                "after_any": False,
            },
        )

    def test_schedule_sends_only_given_fields(self) -> None:
        """schedule leaves out None fields; a str payload is a JSON string."""
        self.server.script = [Reply(201, {"task": TASK}), Reply(201, {"task": TASK})]
        client = self.client()
        client.schedule("report", "plain text", in_=dt.timedelta(seconds=1.5))
        client.schedule("report", in_="10s", every="1h", cron=None)
        first, second = self.server.seen
        self.assertEqual(first.json(), {"type": "report", "payload": "plain text", "in": "1.5s"})
        self.assertEqual(second.json(), {"type": "report", "in": "10s", "every": "1h"})
        self.assertNotIn("traceparent", first.headers)

    def test_schedule_many(self) -> None:
        """schedule_many POSTs /tasks:many and returns the whole answer."""
        answer = {
            "scheduled": 1,
            "batch": "b1",
            "results": [
                {"index": 0, "id": "x", "status": "scheduled"},
                {"index": 1, "status": "invalid", "error": "bad"},
            ],
        }
        self.server.script = [Reply(200, answer)]
        got = self.client().schedule_many(
            [
                {"id": "x", "type": "a", "in_": dt.timedelta(seconds=90)},
                {"type": "b", "cron": None},
            ],
            partial=True,
            batch="b1",
            on_complete={"type": "done", "payload": {"n": 2}},
        )
        self.assertEqual(got, answer)
        (seen,) = self.server.seen
        self.assertEqual((seen.method, seen.path), ("POST", "/api/v1/tasks:many"))
        self.assertCommonHeaders(seen, body=True)
        self.assertEqual(
            seen.json(),
            {
                "tasks": [{"id": "x", "type": "a", "in": "1m30s"}, {"type": "b"}],
                "partial": True,
                "batch": "b1",
                "on_complete": {"type": "done", "payload": {"n": 2}},
            },
        )

    def test_status(self) -> None:
        """status GETs /tasks/{id}, the id escaped as one segment."""
        answer = {"id": "a/b c", "state": "running", "run": {"id": "a/b c", "state": "running"}}
        self.server.script = [Reply(200, answer)]
        self.assertEqual(self.client().status("a/b c"), answer)
        (seen,) = self.server.seen
        self.assertEqual((seen.method, seen.path), ("GET", "/api/v1/tasks/a%2Fb%20c"))
        self.assertCommonHeaders(seen, body=False)

    def test_status_not_found(self) -> None:
        """A 404 problem raises NotFound, not retried."""
        self.server.script = [problem(404, "not-found", 'no task "nope"')]
        with self.assertRaises(NotFound) as cm:
            self.client().status("nope")
        self.assertEqual(cm.exception.status, 404)
        self.assertEqual(cm.exception.detail, 'no task "nope"')
        self.assertEqual(len(self.server.seen), 1)

    def test_cancel(self) -> None:
        """cancel POSTs /tasks/{id}/cancel without a body."""
        answer = {"id": "t1", "removed": True, "marked": True}
        self.server.script = [Reply(200, answer)]
        self.assertEqual(self.client().cancel("t1"), answer)
        (seen,) = self.server.seen
        self.assertEqual((seen.method, seen.path), ("POST", "/api/v1/tasks/t1/cancel"))
        self.assertCommonHeaders(seen, body=False)

    def test_reschedule(self) -> None:
        """reschedule POSTs {in} or {at} and returns the task."""
        self.server.script = [Reply(200, {"task": TASK}), Reply(200, {"task": TASK})]
        client = self.client()
        self.assertEqual(client.reschedule("t1", in_="5m"), TASK)
        plus2 = dt.timezone(dt.timedelta(hours=2))
        client.reschedule("t1", at=dt.datetime(2030, 1, 2, 3, 4, 5, 500000, tzinfo=plus2))
        first, second = self.server.seen
        self.assertEqual((first.method, first.path), ("POST", "/api/v1/tasks/t1/reschedule"))
        self.assertCommonHeaders(first, body=True)
        self.assertEqual(first.json(), {"in": "5m"})
        self.assertEqual(second.json(), {"at": "2030-01-02T03:04:05.500000+02:00"})

    def test_replace(self) -> None:
        """replace PUTs the spec to /tasks/{id}."""
        self.server.script = [Reply(200, {"task": TASK})]
        got = self.client().replace(
            "t1", type="email.send", payload=[1, 2], cron="0 9 * * *", tz="Europe/Paris",
            traceparent="00-abc-def-01",
        )
        self.assertEqual(got, TASK)
        (seen,) = self.server.seen
        self.assertEqual((seen.method, seen.path), ("PUT", "/api/v1/tasks/t1"))
        self.assertCommonHeaders(seen, body=True)
        self.assertEqual(seen.headers["traceparent"], "00-abc-def-01")
        self.assertEqual(
            seen.json(),
            {"type": "email.send", "payload": [1, 2], "cron": "0 9 * * *", "tz": "Europe/Paris"},
        )

    def test_health_runs_batch(self) -> None:
        """health, runs (with its query) and batch GET their routes."""
        self.server.script = [
            Reply(200, {"status": "ok"}),
            Reply(200, {"runs": [], "continue": ""}),
            Reply(200, {"id": "b1", "complete": False}),
        ]
        client = self.client()
        self.assertEqual(client.health(), {"status": "ok"})
        self.assertEqual(
            client.runs(state="dead", type="a b", limit=10, continue_="c/1", batch=None),
            {"runs": [], "continue": ""},
        )
        self.assertEqual(client.batch("b1"), {"id": "b1", "complete": False})
        paths = [(s.method, s.path) for s in self.server.seen]
        self.assertEqual(
            paths,
            [
                ("GET", "/api/v1/health"),
                ("GET", "/api/v1/runs?state=dead&type=a+b&limit=10&continue=c%2F1"),
                ("GET", "/api/v1/batches/b1"),
            ],
        )

    def test_base_url_forms(self) -> None:
        """/api/v1 is added to the base URL unless it is there."""
        for base in ("http://h:1", "http://h:1/", "http://h:1/api/v1", "http://h:1/api/v1/"):
            self.assertEqual(Client(base, TOKEN).base_url, "http://h:1/api/v1")
        self.assertEqual(Client("https://h/lc", TOKEN).base_url, "https://h/lc/api/v1")
        with self.assertRaises(ValueError):
            Client("h:1", TOKEN)

    def test_redirect_is_not_followed(self) -> None:
        """A redirect raises instead of carrying the token elsewhere."""
        self.server.script = [Reply(302, None, {"Location": "http://elsewhere.invalid/"})]
        with self.assertRaises(ApiError) as cm:
            self.client().health()
        self.assertEqual(cm.exception.status, 302)
        self.assertIn("not followed", str(cm.exception))
        self.assertEqual(len(self.server.seen), 1)


class RetryTests(ServerTestCase):
    """Retries of 429, 503 and connection errors."""

    def test_503_honours_retry_after(self) -> None:
        """A 503 with Retry-After: 1 is retried about 1 s later."""
        self.server.script = [
            problem(503, "unavailable", "storage is throttling", {"Retry-After": "1"}),
            Reply(201, {"task": TASK}),
        ]
        task = self.client(backoff=5.0, max_backoff=5.0).schedule("a", id="t1")
        self.assertEqual(task, TASK)
        first, second = self.server.seen
        self.assertEqual(first.body, second.body)
        self.assertGreaterEqual(second.at - first.at, 0.9)
        self.assertLess(second.at - first.at, 1.8)

    def test_429_without_retry_after_backs_off(self) -> None:
        """A 429 without Retry-After is retried after a backoff."""
        self.server.script = [
            Reply(429, "slow down"),
            Reply(429, "slow down"),
            Reply(200, {"status": "ok"}),
        ]
        start = time.monotonic()
        self.assertEqual(self.client(backoff=0.1, max_backoff=1.0).health(), {"status": "ok"})
        self.assertEqual(len(self.server.seen), 3)
        # The backoffs are in [0.05, 0.1] and [0.1, 0.2].
        self.assertGreaterEqual(time.monotonic() - start, 0.15)

    def test_429_applies_to_posts_without_id(self) -> None:
        """429 is retried even for a POST that is not idempotent."""
        self.server.script = [Reply(429, None, {"Retry-After": "0"}), Reply(201, {"task": TASK})]
        self.assertEqual(self.client().schedule("a"), TASK)
        self.assertEqual(len(self.server.seen), 2)

    def test_retries_stop(self) -> None:
        """After retries retries the last error is raised."""
        self.server.default = Reply(
            503,
            {"type": "urn:leasecron:problem:unavailable", "title": "Unavailable", "status": 503},
            {"Retry-After": "0"},
        )
        with self.assertRaises(ApiError) as cm:
            self.client(retries=2).status("t1")
        self.assertEqual(cm.exception.status, 503)
        self.assertEqual(cm.exception.kind, "unavailable")
        self.assertEqual(cm.exception.retry_after, 0.0)
        self.assertEqual(len(self.server.seen), 3)

    def test_no_retries(self) -> None:
        """retries=0 sends once."""
        self.server.default = Reply(503, "down")
        with self.assertRaises(ApiError):
            self.client(retries=0).health()
        self.assertEqual(len(self.server.seen), 1)

    def test_other_errors_are_not_retried(self) -> None:
        """A 500 is raised at once, its text as the detail."""
        self.server.default = Reply(500, "boom")
        with self.assertRaises(ApiError) as cm:
            self.client().health()
        self.assertEqual(cm.exception.detail, "boom")
        self.assertEqual(len(self.server.seen), 1)

    def test_outcome_unknown_schedule_is_not_retried(self) -> None:
        """A schedule answered 500 outcome-unknown is raised after one try.

        The server answers it when a write storage did not answer may have
        been made (docs/api.md); sent again, a task due now that ran would
        be scheduled a second time. The problem names the task to look up.
        """
        self.server.script = [
            problem(500, "outcome-unknown", "storage did not answer whether task t1 was written", id="t1"),
            Reply(201, {"task": TASK}),
        ]
        with self.assertRaises(ApiError) as cm:
            self.client().schedule("a", id="t1")
        self.assertEqual(cm.exception.status, 500)
        self.assertEqual(cm.exception.kind, "outcome-unknown")
        self.assertEqual(cm.exception.problem["id"], "t1")
        self.assertEqual(len(self.server.seen), 1)

    def test_connection_error_retried_when_idempotent(self) -> None:
        """A dropped connection is retried for idempotent requests."""
        self.server.script = [Reply(drop=True), Reply(200, {"status": "ok"})]
        self.assertEqual(self.client().health(), {"status": "ok"})
        self.assertEqual(len(self.server.seen), 2)

        # A batch's first call seals it: a repeat answers as the first.
        self.server.seen.clear()
        self.server.script = [Reply(drop=True), Reply(200, {"scheduled": 2})]
        self.client().schedule_many([{"id": "x", "type": "a"}, {"id": "y", "type": "a"}], batch="b1")
        self.assertEqual(len(self.server.seen), 2)

    def test_start_bulk_is_retried_with_its_id(self) -> None:
        """start_bulk names the operation, so a dropped send is sent again as it was.

        The server finds the first send's operation by its id and starts
        nothing more; the client draws the id when none is given.
        """
        bulk = {"id": "", "op": {"kind": "requeue-dead", "filter": {}}, "state": "running"}
        self.server.script = [Reply(drop=True), Reply(202, bulk)]
        self.client().start_bulk(
            "requeue-dead", expect=3, type="mail", since=dt.timedelta(hours=24)
        )
        self.assertEqual(len(self.server.seen), 2)
        first, second = (json.loads(s.body) for s in self.server.seen)
        self.assertEqual(first, second)
        self.assertRegex(first["id"], r"^bulk-[0-9a-f-]{36}$")
        self.assertEqual(
            {k: v for k, v in first.items() if k != "id"},
            {"kind": "requeue-dead", "type": "mail", "since": "24h0m0s", "expect": 3},
        )
        self.assertEqual(self.server.seen[0].path, "/api/v1/bulk")

        self.server.seen.clear()
        self.server.script = [Reply(202, bulk), Reply(200, bulk), Reply(200, {"operations": []})]
        c = self.client()
        c.start_bulk("cancel-pending", expect=0, id="bulk-mine", until="2030-01-01T00:00:00Z")
        self.assertEqual(json.loads(self.server.seen[-1].body)["id"], "bulk-mine")
        # An empty id is none to the server: the client draws one.
        self.server.seen.clear()
        self.server.script = [Reply(202, bulk), Reply(200, bulk), Reply(200, {"operations": []})]
        c.start_bulk("cancel-pending", expect=0, id="")
        self.assertRegex(json.loads(self.server.seen[-1].body)["id"], r"^bulk-[0-9a-f-]{36}$")
        self.server.seen.clear()
        self.server.script = [Reply(200, bulk), Reply(200, {"operations": []})]
        c.bulk("bulk-a/b")
        c.bulks()
        self.assertEqual(
            [(s.method, s.path) for s in self.server.seen],
            [("GET", "/api/v1/bulk/bulk-a%2Fb"), ("GET", "/api/v1/bulk")],
        )

    def test_connection_error_not_retried_when_not_idempotent(self) -> None:
        """A dropped connection is not retried when a resend could duplicate.

        Ids or not: a task due now may have run by the time a resend
        arrives, and the resend would schedule it again (a review found a
        retried POST run its task twice).
        """
        self.server.default = Reply(drop=True)
        with self.assertRaises(ConnectionError) as cm:
            self.client().schedule("a")
        self.assertEqual(len(self.server.seen), 1)
        self.assertNotIn(TOKEN, str(cm.exception))

        for call in (
            lambda c: c.schedule("a", id="t1"),
            lambda c: c.replace("t1", type="a"),
            lambda c: c.schedule_many([{"id": "x", "type": "a"}, {"id": "y", "type": "a"}]),
            lambda c: c.schedule_many([{"id": "x", "type": "a"}, {"type": "a"}]),
            # An empty batch is none to the server: nothing seals it.
            lambda c: c.schedule_many([{"id": "x", "type": "a"}], batch=""),
            lambda c: c.cancel("t1"),
        ):
            self.server.seen.clear()
            with self.assertRaises(ConnectionError):
                call(self.client())
            self.assertEqual(len(self.server.seen), 1)

    def test_timeout(self) -> None:
        """A handler slower than the timeout raises TimeoutError."""
        self.server.default = Reply(200, {"status": "ok"}, delay=1.0)
        start = time.monotonic()
        with self.assertRaises(TimeoutError) as cm:
            self.client(timeout=0.2, retries=0).health()
        self.assertLess(time.monotonic() - start, 0.8)
        self.assertNotIn(TOKEN, str(cm.exception))
        self.assertEqual(len(self.server.seen), 1)

    def test_timeout_retried_when_idempotent(self) -> None:
        """A timed-out GET is sent again."""
        self.server.script = [Reply(200, {}, delay=1.0), Reply(200, {"status": "ok"})]
        self.assertEqual(self.client(timeout=0.2, retries=1).health(), {"status": "ok"})
        self.assertEqual(len(self.server.seen), 2)

    def test_parse_retry_after(self) -> None:
        """Retry-After is read as seconds or an HTTP date."""
        now = 1_700_000_000.0
        self.assertEqual(parse_retry_after("1", now), 1.0)
        self.assertEqual(parse_retry_after(" 0 ", now), 0.0)
        self.assertIsNone(parse_retry_after(None, now))
        self.assertIsNone(parse_retry_after("soon", now))
        date = "Tue, 14 Nov 2023 22:13:40 GMT"  # now + 20 s
        self.assertAlmostEqual(parse_retry_after(date, now), 20.0)
        self.assertEqual(parse_retry_after("Tue, 14 Nov 2023 22:13:00 GMT", now), 0.0)

    def test_retry_after_http_date(self) -> None:
        """A past HTTP date in Retry-After retries at once."""
        self.server.script = [
            Reply(503, "busy", {"Retry-After": "Mon, 01 Jan 2001 00:00:00 GMT"}),
            Reply(200, {"status": "ok"}),
        ]
        start = time.monotonic()
        self.assertEqual(self.client(backoff=5.0, max_backoff=5.0).health(), {"status": "ok"})
        self.assertLess(time.monotonic() - start, 1.0)


class ErrorTests(ServerTestCase):
    """Problem answers map to the exception classes."""

    def test_invalid_field(self) -> None:
        """An invalid-field problem raises Invalid with field and accepted."""
        self.server.script = [
            problem(
                400,
                "invalid-field",
                'in "10 minutes": want a Go duration such as 90s, 10m or 1h30m',
                field="in",
                accepted="a Go duration such as 90s, 10m or 1h30m",
            )
        ]
        with self.assertRaises(Invalid) as cm:
            self.client().schedule("a", in_="10 minutes")
        err = cm.exception
        self.assertEqual(err.status, 400)
        self.assertEqual(err.type, "urn:leasecron:problem:invalid-field")
        self.assertEqual(err.kind, "invalid-field")
        self.assertEqual(err.field, "in")
        self.assertEqual(err.accepted, "a Go duration such as 90s, 10m or 1h30m")
        self.assertEqual(err.problem["status"], 400)
        self.assertIn("10 minutes", str(err))

    def test_unique_key_held(self) -> None:
        """unique-key-held raises UniqueKeyHeld (a Conflict) with holder."""
        self.server.script = [problem(409, "unique-key-held", "held", holder="other-task")]
        with self.assertRaises(UniqueKeyHeld) as cm:
            self.client().schedule("a", unique_key="k")
        self.assertIsInstance(cm.exception, Conflict)
        self.assertEqual(cm.exception.holder, "other-task")

    def test_mapping(self) -> None:
        """Each status maps to its exception class."""
        cases = [
            (problem(401, "unauthorized"), Unauthorized),
            (problem(403, "forbidden"), Forbidden),
            (problem(404, "not-found"), NotFound),
            (problem(409, "conflict"), Conflict),
            (problem(413, "too-large"), Invalid),
            (problem(415, "unsupported-media-type"), Invalid),
            (problem(500, "internal"), ApiError),
        ]
        client = self.client()
        for reply, cls in cases:
            with self.subTest(status=reply.status):
                self.server.script = [reply]
                with self.assertRaises(cls) as cm:
                    client.health()
                self.assertIs(type(cm.exception), cls)
                self.assertEqual(cm.exception.status, reply.status)

    def test_invalid_tasks(self) -> None:
        """422 invalid-tasks raises Invalid listing the errors."""
        errors = [{"index": 1, "field": "type", "detail": "required"}]
        self.server.script = [
            problem(422, "invalid-tasks", "1 of 2 tasks is invalid", errors=errors)
        ]
        with self.assertRaises(Invalid) as cm:
            self.client().schedule_many([{"type": "a"}, {}])
        self.assertEqual(cm.exception.status, 422)
        self.assertEqual(cm.exception.errors, errors)

    def test_non_problem_body(self) -> None:
        """A body that is not a problem becomes the detail."""
        self.server.script = [Reply(502, "<html>Bad gateway</html>")]
        with self.assertRaises(ApiError) as cm:
            self.client().health()
        self.assertEqual(cm.exception.status, 502)
        self.assertEqual(cm.exception.detail, "<html>Bad gateway</html>")
        self.assertEqual(cm.exception.title, "Bad Gateway")
        self.assertEqual(cm.exception.problem, {})

    def test_errors_pickle(self) -> None:
        """The exceptions survive pickling."""
        err = UniqueKeyHeld(
            409, "urn:leasecron:problem:unique-key-held", "Held", "d", None, {"holder": "h"}
        )
        copy = pickle.loads(pickle.dumps(err))
        self.assertIsInstance(copy, UniqueKeyHeld)
        self.assertEqual((copy.holder, str(copy)), ("h", str(err)))

    def test_token_never_shown(self) -> None:
        """The token is in no repr or error message."""
        client = self.client()
        self.assertNotIn(TOKEN, repr(client))
        self.assertNotIn(TOKEN, str(client))
        self.assertNotIn("s3cr3t", repr(client))
        self.server.script = [problem(401, "unauthorized", "unknown or revoked token")]
        with self.assertRaises(Unauthorized) as cm:
            client.health()
        err = cm.exception
        for text in (str(err), repr(err), repr(err.args), repr(vars(err))):
            self.assertNotIn("s3cr3t", text)
        with self.assertRaises(ValueError) as cm2:
            Client(self.server.url, "lct.x.s3cr3t\r\nX-Evil: 1")
        self.assertNotIn("s3cr3t", str(cm2.exception))


class WaitTests(ServerTestCase):
    """Client.wait."""

    def test_wait_until_succeeded(self) -> None:
        """wait polls until the run succeeded."""
        def state(name: str) -> Reply:
            """Return a status reply whose run is in state name."""
            return Reply(200, {"id": "t1", "state": name, "run": {"id": "t1", "state": name}})

        self.server.script = [
            state("scheduled"),
            state("running"),
            state("running"),
            state("succeeded"),
        ]
        got = self.client().wait("t1", timeout=5, poll=0.05)
        self.assertEqual(got["run"]["state"], "succeeded")
        self.assertEqual(len(self.server.seen), 4)
        self.assertTrue(all(s.path == "/api/v1/tasks/t1" for s in self.server.seen))

    def test_wait_times_out(self) -> None:
        """wait raises TimeoutError when the state is not reached."""
        self.server.default = Reply(
            200, {"id": "t1", "state": "running", "run": {"state": "running"}}
        )
        start = time.monotonic()
        with self.assertRaises(TimeoutError) as cm:
            self.client().wait("t1", timeout=1.0, poll=0.05)
        # Safety strict (never before the timeout), liveness generous: on
        # a loaded machine each poll can take a good part of the timeout.
        self.assertGreaterEqual(time.monotonic() - start, 1.0)
        self.assertLess(time.monotonic() - start, 10)
        self.assertIn("running", str(cm.exception))
        self.assertGreaterEqual(len(self.server.seen), 2)

    def test_wait_custom_states(self) -> None:
        """wait takes a single state as states."""
        self.server.script = [Reply(200, {"id": "t1", "run": {"state": "running"}})]
        self.assertEqual(self.client().wait("t1", states="running")["run"]["state"], "running")


class ConvertTests(unittest.TestCase):
    """Durations and times."""

    def test_format_duration(self) -> None:
        """timedeltas and seconds are written as Go durations."""
        cases = [
            (dt.timedelta(seconds=10), "10s"),
            (dt.timedelta(seconds=1.5), "1.5s"),
            (dt.timedelta(seconds=90), "1m30s"),
            (dt.timedelta(hours=1), "1h0m0s"),
            (dt.timedelta(hours=1, minutes=30), "1h30m0s"),
            (dt.timedelta(days=1, seconds=1), "24h0m1s"),
            (dt.timedelta(milliseconds=250), "250ms"),
            (dt.timedelta(microseconds=1500), "1.5ms"),
            (dt.timedelta(microseconds=7), "7us"),
            (dt.timedelta(0), "0s"),
            (dt.timedelta(seconds=-2), "-2s"),
            (2.25, "2.25s"),
            (60, "1m0s"),
            ("10m", "10m"),
        ]
        for value, want in cases:
            with self.subTest(value=value):
                self.assertEqual(format_duration(value), want)
        with self.assertRaises(TypeError):
            format_duration(True)

    def test_format_time(self) -> None:
        """datetimes are written in RFC 3339."""
        utc = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
        self.assertEqual(format_time(utc), "2030-01-02T03:04:05Z")
        self.assertEqual(format_time("2030-01-02T03:04:05Z"), "2030-01-02T03:04:05Z")
        naive = dt.datetime(2030, 1, 2, 3, 4, 5)
        parsed = dt.datetime.fromisoformat(format_time(naive).replace("Z", "+00:00"))
        self.assertEqual(parsed, naive.astimezone())

    def test_version(self) -> None:
        """The package has its version."""
        self.assertEqual(leasecron_client.__version__, "0.1.0")


if __name__ == "__main__":
    unittest.main()
