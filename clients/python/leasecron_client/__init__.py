"""A Python client of the leasecron HTTP API (``/api/v1``).

Standard library only. Start with :class:`Client`::

    from leasecron_client import Client

    client = Client("http://localhost:8080", token)
    task = client.schedule("email.send", {"to": "a@example.com"}, in_="10s")
    status = client.wait(task["id"])
"""

from ._convert import format_duration, format_time
from .client import FINAL_STATES, USER_AGENT, Client, __version__, parse_retry_after
from .errors import (
    PROBLEM_PREFIX,
    ApiError,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Unauthorized,
    UniqueKeyHeld,
)

__all__ = [
    "Client",
    "ApiError",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "UniqueKeyHeld",
    "Invalid",
    "FINAL_STATES",
    "PROBLEM_PREFIX",
    "USER_AGENT",
    "format_duration",
    "format_time",
    "parse_retry_after",
    "__version__",
]
