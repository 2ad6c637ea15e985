"""Python client of Ticketing, a FIFO lock service with leases and fencing tokens.

    import ticketing

    client = ticketing.Client(["10.0.0.1:5225", "10.0.0.2:5225"], auth_token="...", owner="box-office-7")
    with client.lock("seat:42", lease=30, wait=5) as lock:
        sell_seat(42, fence=lock.token)

A thin layer over libticketing, the C ABI of the official Rust client (ctypes, no
compiled extension): every behaviour is the Rust client's. docs/python.md in the
repository has the whole API, the errors and what to do on each.
"""

from . import _native
from .client import Client, Holder, Lock, LockContext, Permits, Place, Pool, PoolHolder, ReleaseOutcome
from .errors import (
    Busy,
    ConfigError,
    Error,
    Indeterminate,
    InternalError,
    InvalidArgument,
    NoAnswer,
    NotHolder,
    NotLeader,
    Overloaded,
    ProtocolError,
    Refused,
    ReleaseQueueFull,
    ReleaseUnconfirmed,
    Timeout,
    Unavailable,
)

__version__ = "0.2.0"

#: The C ABI version this package speaks (include/ticketing.h, TICKETING_ABI_VERSION).
ABI_VERSION = _native.ABI_VERSION


def library_version() -> str:
    """The version of the loaded libticketing (the crate's version). Wraps ticketing_version_string."""
    version: bytes = _native.quick.ticketing_version_string()
    return version.decode()


def library_path() -> str:
    """The path libticketing was loaded from."""
    return _native.PATH


__all__ = [
    "ABI_VERSION",
    "Busy",
    "Client",
    "ConfigError",
    "Error",
    "Holder",
    "Indeterminate",
    "InternalError",
    "InvalidArgument",
    "Lock",
    "LockContext",
    "NoAnswer",
    "NotHolder",
    "NotLeader",
    "Overloaded",
    "Permits",
    "Place",
    "Pool",
    "PoolHolder",
    "ProtocolError",
    "Refused",
    "ReleaseOutcome",
    "ReleaseQueueFull",
    "ReleaseUnconfirmed",
    "Timeout",
    "Unavailable",
    "library_path",
    "library_version",
]
