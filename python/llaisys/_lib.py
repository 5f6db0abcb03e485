"""The shared library, loaded with ctypes: the C declarations of include/llaisys.h.

Where the library comes from, first found: $LLAISYS_LIBRARY; the path `make install` recorded
(_installed.py); build/libllaisys.so of the source tree this package sits in; the system's
library path (libllaisys.so.1).
"""

import ctypes
import ctypes.util
import os

API_VERSION = 1

# enum llaisys_status
OK = 0
NO_KV_ROOM = 1
ABORTED = 2
EMPTY_RANGE = 3
ERR_INVALID_ARG = -1
ERR_INVALID_SEQ = -2
ERR_INVALID_POS = -3
ERR_INVALID_TOKEN = -4
ERR_UNSUPPORTED = -5
ERR_BUSY = -6
ERR_TOO_LONG = -7
ERR_OVERLOADED = -8
ERR_IO = -9
ERR_MODEL = -10
ERR_NO_MEMORY = -11
ERR_INTERNAL = -12

# enum llaisys_request_state, enum llaisys_finish
STATES = ("waiting", "running", "preempted", "finished")
FINISH = (None, "stop", "length", "cancelled", "error")


class LlaisysError(Exception):
    """A call into the library failed: `status` is the negative llaisys_status, the message is
    the library's (llaisys_last_error)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status

    @property
    def status_name(self):
        return LIB.llaisys_status_str(self.status).decode()


class Handle:
    """An object that owns one library handle (self._h): closed by close(), by leaving a `with`
    block, or when collected. A subclass names what it is (_what, for the message when used
    after close) and frees its handle in _destroy(h)."""

    _what = "object"
    _h = None

    def _destroy(self, h):
        raise NotImplementedError

    def close(self):
        if self._h:
            h, self._h = self._h, None
            self._destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _handle(self):
        if not self._h:
            raise ValueError("the %s is closed" % self._what)
        return self._h


class ModelParams(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in (
        "n_ctx", "kv_tokens", "kv_blocks", "block_size", "n_seq_max", "n_batch", "n_threads",
        "math")]


class Batch(ctypes.Structure):
    _fields_ = [
        ("n_tokens", ctypes.c_int32),
        ("token", ctypes.POINTER(ctypes.c_int32)),
        ("pos", ctypes.POINTER(ctypes.c_int32)),
        ("seq_id", ctypes.POINTER(ctypes.c_int32)),
        ("logits", ctypes.POINTER(ctypes.c_int8)),
    ]


class KvStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "capacity", "used", "free", "peak_used", "cached", "seq_tokens", "prefix_hits")] + [
        ("block_size", ctypes.c_int32), ("n_blocks", ctypes.c_int32)]


class EngineStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in (
        "waiting", "running", "queued", "kv_blocks", "kv_in_use", "kv_cached", "kv_free",
        "block_size")] + [(n, ctypes.c_uint64) for n in (
            "steps", "submitted", "finished", "rejected", "preemptions", "prompt_tokens",
            "cached_tokens", "decode_tokens", "generated_tokens")] + [("busy_s", ctypes.c_double)]


class Usage(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in (
        "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "preemptions")]


class Timings(ctypes.Structure):
    _fields_ = [(n, ctypes.c_double) for n in ("queue_s", "ttft_s", "decode_s", "total_s")]


class Event(ctypes.Structure):
    _fields_ = [
        ("ids", ctypes.POINTER(ctypes.c_int32)),
        ("n_ids", ctypes.c_int32),
        ("text", ctypes.c_void_p),
        ("text_len", ctypes.c_size_t),
        ("reasoning", ctypes.c_void_p),
        ("reasoning_len", ctypes.c_size_t),
        ("logprobs", ctypes.POINTER(ctypes.c_float)),
        ("n_top", ctypes.c_int32),
        ("top_ids", ctypes.POINTER(ctypes.c_int32)),
        ("top_logprobs", ctypes.POINTER(ctypes.c_float)),
        ("state", ctypes.c_int32),
        ("finish", ctypes.c_int32),
        ("stop_token_id", ctypes.c_int32),
        ("stop_reason", ctypes.c_char_p),
        ("error", ctypes.c_char_p),
        ("seed", ctypes.c_uint64),
        ("usage", Usage),
        ("timings", Timings),
    ]


ABORT_FN = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)

_c = ctypes
_P = ctypes.c_void_p
_I = ctypes.c_int32
_PROTOS = {
    "llaisys_api_version": (_I, []),
    "llaisys_status_str": (_c.c_char_p, [_I]),
    "llaisys_last_error": (_c.c_char_p, []),
    "llaisys_free": (None, [_P]),
    "llaisys_model_default_params": (ModelParams, []),
    "llaisys_model_create": (_I, [_c.c_char_p, _c.POINTER(ModelParams), _c.POINTER(_P)]),
    "llaisys_model_destroy": (None, [_P]),
    "llaisys_model_type": (_c.c_char_p, [_P]),
    "llaisys_model_n_vocab": (_I, [_P]),
    "llaisys_model_n_ctx": (_I, [_P]),
    "llaisys_model_n_seq_max": (_I, [_P]),
    "llaisys_model_n_batch": (_I, [_P]),
    "llaisys_model_is_eos": (_c.c_bool, [_P, _I]),
    "llaisys_model_tokenize": (_I, [_P, _c.c_char_p, _c.c_size_t, _c.c_bool,
                                    _c.POINTER(_I), _I]),
    "llaisys_model_detokenize": (_P, [_P, _c.POINTER(_I), _I, _c.c_bool]),
    "llaisys_model_set_abort_callback": (None, [_P, ABORT_FN, _P]),
    "llaisys_decode": (_I, [_P, _c.POINTER(Batch)]),
    "llaisys_get_logits": (_c.POINTER(_c.c_float), [_P]),
    "llaisys_get_logits_ith": (_c.POINTER(_c.c_float), [_P, _I]),
    "llaisys_n_outputs": (_I, [_P]),
    "llaisys_output_ids": (_c.POINTER(_I), [_P]),
    "llaisys_kv_seq_rm": (_I, [_P, _I, _I, _I]),
    "llaisys_kv_seq_cp": (_I, [_P, _I, _I, _I, _I]),
    "llaisys_kv_seq_keep": (_I, [_P, _I]),
    "llaisys_kv_seq_pos_max": (_I, [_P, _I, _c.POINTER(_I)]),
    "llaisys_kv_seq_add": (_I, [_P, _I, _I, _I, _I]),
    "llaisys_kv_stats": (_I, [_P, _c.POINTER(KvStats)]),
    "llaisys_kv_reset_prefix_cache": (_I, [_P]),
    "llaisys_engine_create": (_I, [_c.c_char_p, _c.c_char_p, _c.POINTER(_P)]),
    "llaisys_engine_destroy": (None, [_P]),
    "llaisys_engine_describe": (_P, [_P]),
    "llaisys_engine_submit": (_I, [_P, _c.c_char_p, _c.POINTER(_P)]),
    "llaisys_engine_step": (_I, [_P, _c.POINTER(_I)]),
    "llaisys_engine_has_work": (_c.c_bool, [_P]),
    "llaisys_engine_start": (_I, [_P]),
    "llaisys_engine_stop": (_I, [_P]),
    "llaisys_engine_reset_prefix_cache": (_I, [_P]),
    "llaisys_engine_generate": (_I, [_P, _c.c_char_p, _c.POINTER(_P)]),
    "llaisys_engine_embed": (_I, [_P, _c.c_char_p, _c.POINTER(_P)]),
    "llaisys_engine_rerank": (_I, [_P, _c.c_char_p, _c.POINTER(_P)]),
    "llaisys_engine_stats": (_I, [_P, _c.POINTER(EngineStats)]),
    "llaisys_finish_str": (_c.c_char_p, [_I]),
    "llaisys_request_poll": (_I, [_P, _c.c_double, _c.POINTER(Event)]),
    "llaisys_request_cancel": (None, [_P]),
    "llaisys_request_state": (_I, [_P, _c.POINTER(_I)]),
    "llaisys_request_id": (_c.c_uint64, [_P]),
    "llaisys_request_release": (None, [_P]),
}


def _candidates():
    env = os.environ.get("LLAISYS_LIBRARY")
    if env:
        yield env
        return
    try:
        from ._installed import LIBRARY
        yield LIBRARY
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libllaisys.so")
    found = ctypes.util.find_library("llaisys")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        lib = ctypes.CDLL(path)
        break
    else:
        raise ImportError("llaisys: libllaisys.so not found (tried %s); build it with `make`, "
                          "install it with `make install`, or set LLAISYS_LIBRARY"
                          % (", ".join(tried) or "the system library path"))
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    if lib.llaisys_api_version() != API_VERSION:
        raise ImportError("llaisys: %s has API version %d, this package needs %d"
                          % (path, lib.llaisys_api_version(), API_VERSION))
    lib.path = path
    return lib


LIB = _load()


def check(status):
    """Raise LlaisysError for a negative status; return it otherwise."""
    if status < 0:
        raise LlaisysError(status, LIB.llaisys_last_error().decode("utf-8", "replace"))
    return status


def take_string(ptr):
    """A char * the library handed over, as str (freed here); raises for NULL."""
    if not ptr:
        raise LlaisysError(ERR_INTERNAL, LIB.llaisys_last_error().decode("utf-8", "replace"))
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        LIB.llaisys_free(ptr)
