"""ctypes declarations of include/ticketing.h, and the library they load.

The library is found at $TICKETING_LIBRARY when that is set, else next to this file
(where `pip install ./python` puts it). Its ABI version must be the one declared here.

Two handles on the same library: `blocking` (ctypes.CDLL) releases the GIL for the
duration of each call, so threads sharing one Client wait in parallel; `quick`
(ctypes.PyDLL) keeps it, for the calls that never block (getters, frees), which are
cheaper without a GIL hand-over.
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import POINTER, byref, c_char, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import Any, Callable, Dict, Optional

ABI_VERSION = 3
_NAME = "libticketing.dylib" if sys.platform == "darwin" else "libticketing.so"

class Holder(ctypes.Structure):
    """ticketing_holder."""

    _fields_ = [
        ("token", c_uint64),
        ("lease_left_ms", c_uint64),
        ("waiters", c_uint32),
        ("owner_len", c_uint32),
        ("owner", c_char * 256),
    ]


class HoldPart(ctypes.Structure):
    """ticketing_hold_part."""

    _fields_ = [("key", c_char_p), ("count", c_uint32), ("capacity", c_uint32)]


class PoolHolder(ctypes.Structure):
    """ticketing_pool_holder."""

    _fields_ = [
        ("token", c_uint64),
        ("lease_left_ms", c_uint64),
        ("count", c_uint32),
        ("owner_len", c_uint32),
        ("owner", c_char * 256),
    ]


class PoolInfo(ctypes.Structure):
    """ticketing_pool_info (holders: TICKETING_POOL_HOLDERS_MAX, 8)."""

    _fields_ = [
        ("capacity", c_uint32),
        ("in_use", c_uint32),
        ("holds", c_uint32),
        ("waiters", c_uint32),
        ("oldest_wait_ms", c_uint64),
        ("holders_len", c_uint32),
        ("holders", PoolHolder * 8),
    ]


def _library_path() -> str:
    configured = os.environ.get("TICKETING_LIBRARY")
    if configured:
        return configured
    bundled = Path(__file__).with_name(_NAME)
    if bundled.is_file():
        return str(bundled)
    raise ImportError(
        f"ticketing: the native library is missing: no {bundled} and TICKETING_LIBRARY is not set. "
        "Install the package from the repository with `pip install ./python` (it builds the library "
        "with cargo), or set TICKETING_LIBRARY to a libticketing.so built by `cargo build --release --lib`."
    )


PATH = _library_path()
try:
    blocking = ctypes.CDLL(PATH)
    quick = ctypes.PyDLL(PATH)
except OSError as e:
    raise ImportError(f"ticketing: cannot load {PATH}: {e}") from e


def _declare(lib: ctypes.CDLL, name: str, restype: Any, *argtypes: Any) -> None:
    function = getattr(lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)


_P = c_void_p  # every handle is opaque
_OUT = POINTER(c_void_p)

_declare(quick, "ticketing_version", c_uint32)
_declare(quick, "ticketing_version_string", c_char_p)
_declare(quick, "ticketing_kind_name", c_char_p, c_int)
_declare(quick, "ticketing_kind_is_definitive", c_int, c_int)
_declare(quick, "ticketing_cause_name", c_char_p, c_int)
_declare(quick, "ticketing_release_outcome_name", c_char_p, c_int)
_declare(quick, "ticketing_resolution_name", c_char_p, c_int)

_declare(blocking, "ticketing_client_new", c_int,
         POINTER(c_char_p), c_size_t, c_char_p, c_size_t, c_char_p, c_char_p, _OUT, _OUT)
# ticketing_client_new whose messages name this package's keywords (tls_ca=, auth_token=).
_declare(blocking, "ticketing_client_new_for", c_int,
         c_char_p, POINTER(c_char_p), c_size_t, c_char_p, c_size_t, c_char_p, c_char_p, _OUT, _OUT)
# ticketing_client_new_for with the cluster's name (NULL: none).
_declare(blocking, "ticketing_client_new_named", c_int,
         c_char_p, c_char_p, POINTER(c_char_p), c_size_t, c_char_p, c_size_t, c_char_p, c_char_p, _OUT, _OUT)
_declare(quick, "ticketing_client_with_owner", c_int, _P, c_char_p, _OUT, _OUT)
_declare(quick, "ticketing_client_owner", c_char_p, _P)
_declare(blocking, "ticketing_client_close", c_int, _P, c_int64, POINTER(c_int), _OUT)
_declare(blocking, "ticketing_client_free", None, _P)

_declare(blocking, "ticketing_acquire", c_int, _P, c_char_p, c_int64, c_int64, _OUT, _OUT)
_declare(blocking, "ticketing_resolve", c_int, _P, _P, c_int64, POINTER(c_int), _OUT, _OUT)
_declare(blocking, "ticketing_lock_release", c_int, _P, POINTER(c_int), _OUT)
_declare(blocking, "ticketing_release", c_int, _P, c_char_p, c_uint64, POINTER(c_int), _OUT)
_declare(blocking, "ticketing_query", c_int, _P, c_char_p, POINTER(c_int), POINTER(Holder), _OUT)

_declare(quick, "ticketing_lock_token", c_uint64, _P)
_declare(quick, "ticketing_lock_key", c_char_p, _P)
_declare(quick, "ticketing_lock_owner", c_char_p, _P)
_declare(quick, "ticketing_lock_lease_ms", c_uint64, _P)
_declare(quick, "ticketing_lock_remaining_ms", c_uint64, _P)
_declare(quick, "ticketing_lock_free", None, _P)

_declare(quick, "ticketing_error_kind", c_int, _P)
_declare(quick, "ticketing_error_message", c_char_p, _P)
_declare(quick, "ticketing_error_cause", c_int, _P)
_declare(quick, "ticketing_error_leader", c_char_p, _P)
_declare(quick, "ticketing_error_is_retryable", c_int, _P)
_declare(quick, "ticketing_error_free", None, _P)

#: ticketing_log_fn: (ctx, level, target, message).
LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p, c_char_p)
_declare(blocking, "ticketing_set_logger", c_int, LOG_FN, c_void_p, c_int, _OUT)
_declare(blocking, "ticketing_test_panic", c_int, c_int)

#: ticketing_wait_check_fn: (ctx) -> nonzero to stop the wait.
WAIT_CHECK_FN = ctypes.CFUNCTYPE(c_int, c_void_p)
_declare(blocking, "ticketing_set_wait_check", c_int, WAIT_CHECK_FN, c_void_p, c_int64, _OUT)

# Futures (never block but ticketing_future_block_until_ready) and completion queues.
_declare(quick, "ticketing_acquire_start", c_int, _P, c_char_p, c_int64, c_int64, _OUT, _OUT)
_declare(quick, "ticketing_lock_release_start", c_int, _P, _OUT, _OUT)
_declare(quick, "ticketing_release_start", c_int, _P, c_char_p, c_uint64, _OUT, _OUT)
_declare(quick, "ticketing_query_start", c_int, _P, c_char_p, _OUT, _OUT)
_declare(quick, "ticketing_resolve_start", c_int, _P, _P, c_int64, _OUT, _OUT)
_declare(quick, "ticketing_future_is_ready", c_int, _P)
_declare(blocking, "ticketing_future_block_until_ready", c_int, _P, c_int64, POINTER(c_int), _OUT)
_declare(quick, "ticketing_future_set_queue", c_int, _P, _P, c_uint64, _OUT)
_declare(quick, "ticketing_future_cancel", c_int, _P)
_declare(quick, "ticketing_future_get_lock", c_int, _P, _OUT, _OUT)
_declare(quick, "ticketing_future_get_release", c_int, _P, POINTER(c_int), _OUT)
_declare(quick, "ticketing_future_get_query", c_int, _P, POINTER(c_int), POINTER(Holder), _OUT)
_declare(quick, "ticketing_future_get_resolve", c_int, _P, POINTER(c_int), _OUT, _OUT)
_declare(quick, "ticketing_future_free", None, _P)
_declare(quick, "ticketing_queue_new", c_int, _OUT, _OUT)
_declare(quick, "ticketing_queue_fd", c_int, _P)
_declare(quick, "ticketing_queue_take", c_size_t, _P, POINTER(c_uint64), c_size_t)
_declare(quick, "ticketing_queue_free", None, _P)

# Counted and multi-key holds, places in line, pools, the lock's keys and deadline.
#: ticketing_place_callback: (ahead, grants_per_ks, ctx). Never given a Python function:
#: it would run on a client thread (places come through a queue instead).
PLACE_FN = ctypes.CFUNCTYPE(None, c_uint32, c_uint32, c_void_p)
_declare(blocking, "ticketing_hold", c_int,
         _P, POINTER(HoldPart), c_size_t, c_int64, c_int64, PLACE_FN, c_void_p, _OUT, _OUT)
_declare(quick, "ticketing_hold_start", c_int,
         _P, POINTER(HoldPart), c_size_t, c_int64, c_int64, PLACE_FN, c_void_p, _OUT, _OUT)
_declare(quick, "ticketing_hold_start_queued", c_int,
         _P, POINTER(HoldPart), c_size_t, c_int64, c_int64, _P, c_uint64, _OUT, _OUT)
_declare(quick, "ticketing_future_take_place", c_int, _P, POINTER(c_uint32), POINTER(c_uint32))
_declare(quick, "ticketing_lock_key_count", c_size_t, _P)
_declare(quick, "ticketing_lock_key_at", c_int,
         _P, c_size_t, POINTER(c_char_p), POINTER(c_uint32), POINTER(c_uint32), _OUT)
_declare(quick, "ticketing_now_ns", c_int64)
_declare(quick, "ticketing_lock_deadline_ns", c_int64, _P)
_declare(blocking, "ticketing_pool", c_int, _P, c_char_p, POINTER(PoolInfo), _OUT)
_declare(quick, "ticketing_pool_start", c_int, _P, c_char_p, _OUT, _OUT)
_declare(quick, "ticketing_future_get_pool", c_int, _P, POINTER(PoolInfo), _OUT)

if quick.ticketing_version() != ABI_VERSION:
    raise ImportError(
        f"ticketing: {PATH} has ABI version {quick.ticketing_version()}, this package needs "
        f"{ABI_VERSION}: reinstall the package from the same repository checkout as the library"
    )

def _table(name_of: Callable[[int], Optional[bytes]], first: int) -> Dict[int, str]:
    """A numbered table of the library: number -> name, from ``first`` until the name
    function's NULL (past the end: "unknown" is a resolution's name, not the end)."""
    table: Dict[int, str] = {}
    number = first
    while (name := name_of(number)) is not None:
        table[number] = name.decode()
        number += 1
    return table


# The ABI's tables, as the library names them (src/capi/abi.rs declares each once).
#: Status and error kinds (TICKETING_*): number -> name ("ok", "busy", ...).
KINDS = _table(quick.ticketing_kind_name, 0)
#: Kind name -> number.
KIND = {name: number for number, name in KINDS.items()}
#: Kind name -> whether an error of it means the operation certainly did not take effect.
DEFINITIVE = {name: bool(quick.ticketing_kind_is_definitive(number)) for number, name in KINDS.items()}
#: Causes of an indeterminate acquire (TICKETING_CAUSE_*): number -> name.
CAUSES = _table(quick.ticketing_cause_name, 1)
#: Release outcomes (TICKETING_RELEASED, ...): number -> name.
OUTCOMES = _table(quick.ticketing_release_outcome_name, 1)
#: Resolutions (TICKETING_HELD, ...): name -> number.
RESOLUTION = {name: number for number, name in _table(quick.ticketing_resolution_name, 1).items()}
OK = KIND["ok"]

#: The signature of the *_free functions, for the finalizers that keep one bound.
Free = Callable[[Any], None]

__all__ = ["blocking", "quick", "byref", "Holder", "HoldPart", "PoolHolder", "PoolInfo", "PATH", "Free", "LOG_FN",
           "PLACE_FN", "WAIT_CHECK_FN"]
