"""The exceptions raised for the API's error answers (RFC 9457 problems)."""

from __future__ import annotations

import http
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "PROBLEM_PREFIX",
    "ApiError",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "UniqueKeyHeld",
    "Invalid",
    "error_from_response",
]

#: What every problem ``type`` of the API starts with.
PROBLEM_PREFIX = "urn:leasecron:problem:"

# How much of a body that is not a problem is kept as the detail.
_MAX_TEXT_DETAIL = 2000


class ApiError(Exception):
    """An error answer of the API (any status the call did not expect).

    Attributes:
        status: the HTTP status code.
        type: the problem type, e.g. ``urn:leasecron:problem:invalid-field``
            (empty when the body was not a problem).
        title: the problem title (the status phrase when there was none).
        detail: the problem detail, or the text of a body that was not a
            problem.
        field: the field or parameter at fault, when the problem names one.
        problem: the whole problem+json object (empty when there was none).
        retry_after: the seconds the ``Retry-After`` header asked to wait,
            or None.
    """

    def __init__(
        self,
        status: int,
        type: str = "",
        title: str = "",
        detail: str = "",
        field: str | None = None,
        problem: Mapping[str, Any] | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        """Make the error of an answer with status and its problem fields."""
        self.status = status
        self.type = type
        self.title = title or _phrase(status)
        self.detail = detail
        self.field = field
        self.problem: dict[str, Any] = dict(problem or {})
        self.retry_after = retry_after
        super().__init__(self._message())

    @property
    def kind(self) -> str:
        """The problem type without its prefix, e.g. ``"invalid-field"``."""
        if self.type.startswith(PROBLEM_PREFIX):
            return self.type[len(PROBLEM_PREFIX):]
        return self.type

    def _message(self) -> str:
        """Return the one-line message of the error."""
        text = f"HTTP {self.status} {self.title}".rstrip()
        if self.detail:
            text += f": {self.detail}"
        if self.field:
            text += f" (field {self.field!r})"
        return text

    def __reduce__(self):
        """Pickle the error by its fields (the default needs one argument)."""
        args = (self.status, self.type, self.title, self.detail, self.field, self.problem)
        return (self.__class__, args, {"retry_after": self.retry_after})


class Unauthorized(ApiError):
    """401: no token, or an unknown or revoked one."""


class Forbidden(ApiError):
    """403: the token's role or types do not allow the call."""


class NotFound(ApiError):
    """404: no such task, batch, bulk operation or dead letter."""


class Conflict(ApiError):
    """409: the id is taken by a different task, or a count differs."""


class UniqueKeyHeld(Conflict):
    """409 ``unique-key-held``: a live task holds the unique key."""

    @property
    def holder(self) -> str | None:
        """The id of the task holding the key, when the server named it."""
        return self.problem.get("holder")


class Invalid(ApiError):
    """400, 413, 415 or 422: the request was refused as it was written."""

    @property
    def accepted(self) -> str | None:
        """What the field accepts, when the server said."""
        return self.problem.get("accepted")

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The invalid tasks of a 422 ``invalid-tasks``: ``{index, field, detail}``."""
        return list(self.problem.get("errors") or [])


_BY_STATUS: dict[int, type[ApiError]] = {
    400: Invalid,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: Invalid,
    415: Invalid,
    422: Invalid,
}


def _phrase(status: int) -> str:
    """Return the standard reason phrase of status, or ``""``."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _text(value: Any) -> str:
    """Return a problem member as text (``""`` for None)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def error_from_response(
    status: int,
    body: bytes,
    *,
    retry_after: float | None = None,
    location: str | None = None,
) -> ApiError:
    """Return the ApiError (subclass) for an error answer.

    A JSON object body is read as a problem; any other body becomes the
    detail, as text.
    """
    text = body.decode("utf-8", "replace")
    problem: dict[str, Any] = {}
    if text.strip():
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            problem = parsed
    ptype = _text(problem.get("type"))
    title = _text(problem.get("title"))
    detail = _text(problem.get("detail"))
    field = problem.get("field")
    if not (ptype or title or detail):
        detail = text.strip()[:_MAX_TEXT_DETAIL]
    if not detail and location:
        detail = f"redirected to {location} (not followed)"
    cls = _BY_STATUS.get(status, ApiError)
    if status == 409 and ptype.endswith("unique-key-held"):
        cls = UniqueKeyHeld
    return cls(
        status,
        ptype,
        title,
        detail,
        field if isinstance(field, str) else None,
        problem,
        retry_after=retry_after,
    )
