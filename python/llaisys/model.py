"""The model level: batches of tokens of many sequences decoded over a paged KV cache, their
logits, and the KV sequence operations (llaisys.h, "The model")."""

import array
import ctypes

from . import _lib
from ._lib import LIB, check


class Model(_lib.Handle):
    """A model directory opened for decoding.

    Model(model_dir, n_ctx=0, kv_tokens=0, kv_blocks=0, block_size=0, n_seq_max=0, n_batch=0,
    threads=0, exact=False): zeros take the library's defaults (llaisys.h). One thread uses a
    Model at a time. Use it as a context manager, or call close().
    """

    _what = "model"

    def __init__(self, model_dir, *, n_ctx=0, kv_tokens=0, kv_blocks=0, block_size=0,
                 n_seq_max=0, n_batch=0, threads=0, exact=False):
        p = _lib.ModelParams(n_ctx=n_ctx, kv_tokens=kv_tokens, kv_blocks=kv_blocks,
                             block_size=block_size, n_seq_max=n_seq_max, n_batch=n_batch,
                             n_threads=threads, math=1 if exact else 0)
        h = ctypes.c_void_p()
        check(LIB.llaisys_model_create(str(model_dir).encode(), ctypes.byref(p), ctypes.byref(h)))
        self._h = h
        self._abort = None
        self.type = LIB.llaisys_model_type(h).decode()
        self.n_vocab = LIB.llaisys_model_n_vocab(h)
        self.n_ctx = LIB.llaisys_model_n_ctx(h)
        self.n_seq_max = LIB.llaisys_model_n_seq_max(h)
        self.n_batch = LIB.llaisys_model_n_batch(h)

    def _destroy(self, h):
        LIB.llaisys_model_destroy(h)

    # ---- tokenizer ----

    def tokenize(self, text, add_special=True):
        """Token ids of text (add_special: the tokenizer's BOS and such)."""
        b = text.encode("utf-8")
        cap = len(b) + 8
        while True:
            buf = (ctypes.c_int32 * cap)()
            n = check(LIB.llaisys_model_tokenize(self._handle(), b, len(b), add_special, buf, cap))
            if n <= cap:
                return list(buf[:n])
            cap = n

    def detokenize(self, ids, skip_special=True):
        arr = (ctypes.c_int32 * len(ids))(*ids)
        ptr = LIB.llaisys_model_detokenize(self._handle(), arr, len(ids), skip_special)
        if not ptr:
            check(_lib.ERR_INVALID_ARG)
        return _lib.take_string(ptr)

    def is_eos(self, token):
        return bool(LIB.llaisys_model_is_eos(self._handle(), token))

    # ---- decode ----

    def decode(self, tokens, seq_ids=0, pos=None, logits=None):
        """Decode a batch: tokens (ids), seq_ids (one id for all rows, or one per row), pos (None:
        each row at its sequence's next position; else one per row, -1 meaning the next),
        logits (None: the last row only; True: every row; else one bool per row).
        Returns 0 (done), 1 (no KV room: nothing changed) or 2 (aborted by the callback);
        raises LlaisysError for invalid input."""
        n = len(tokens)
        if n == 0:
            raise ValueError("decode: an empty batch")
        b = _lib.Batch()
        b.n_tokens = n
        tok = (ctypes.c_int32 * n)(*tokens)
        b.token = tok
        seqs = [seq_ids] * n if isinstance(seq_ids, int) else list(seq_ids)
        if len(seqs) != n:
            raise ValueError("decode: %d tokens but %d seq_ids" % (n, len(seqs)))
        sq = (ctypes.c_int32 * n)(*seqs)
        b.seq_id = sq
        keep = [tok, sq]
        if pos is not None:
            if len(pos) != n:
                raise ValueError("decode: %d tokens but %d positions" % (n, len(pos)))
            ps = (ctypes.c_int32 * n)(*pos)
            b.pos = ps
            keep.append(ps)
        if logits is not None:
            want = [1] * n if logits is True else [1 if x else 0 for x in logits]
            if len(want) != n:
                raise ValueError("decode: %d tokens but %d logits flags" % (n, len(want)))
            lg = (ctypes.c_int8 * n)(*want)
            b.logits = lg
            keep.append(lg)
        return check(LIB.llaisys_decode(self._handle(), ctypes.byref(b)))

    @property
    def n_outputs(self):
        return LIB.llaisys_n_outputs(self._handle())

    @property
    def output_ids(self):
        """The batch row of each logits row of the last decode."""
        n = self.n_outputs
        p = LIB.llaisys_output_ids(self._handle())
        return list(p[:n]) if n else []

    def logits(self, i=-1):
        """A copy of one logits row of the last decode, as array('f'): batch row i (i >= 0) or
        output -i from the end (i < 0)."""
        p = LIB.llaisys_get_logits_ith(self._handle(), i)
        if not p:
            check(_lib.ERR_INVALID_ARG)
        out = array.array("f", bytes(self.n_vocab * 4))
        ctypes.memmove(out.buffer_info()[0], p, self.n_vocab * 4)
        return out

    def set_abort_callback(self, fn):
        """fn() -> bool is asked between layers during decode; True stops it (decode returns
        2). None removes it."""
        if fn is None:
            self._abort = None
            LIB.llaisys_model_set_abort_callback(self._handle(), _lib.ABORT_FN(), None)
            return
        self._abort = _lib.ABORT_FN(lambda data: bool(fn()))
        LIB.llaisys_model_set_abort_callback(self._handle(), self._abort, None)

    # ---- KV sequence operations: ranges [p0, p1), -1 is open ----

    def kv_seq_rm(self, seq, p0=-1, p1=-1):
        """Remove [p0, p1) of seq (-1: every sequence); returns 0, or 3 when the range held
        nothing."""
        return check(LIB.llaisys_kv_seq_rm(self._handle(), seq, p0, p1))

    def kv_seq_cp(self, src, dst, p0=-1, p1=-1):
        return check(LIB.llaisys_kv_seq_cp(self._handle(), src, dst, p0, p1))

    def kv_seq_keep(self, seq):
        return check(LIB.llaisys_kv_seq_keep(self._handle(), seq))

    def kv_seq_pos_max(self, seq):
        p = ctypes.c_int32()
        check(LIB.llaisys_kv_seq_pos_max(self._handle(), seq, ctypes.byref(p)))
        return p.value

    def kv_seq_add(self, seq, p0, p1, delta):
        return check(LIB.llaisys_kv_seq_add(self._handle(), seq, p0, p1, delta))

    def kv_stats(self):
        s = _lib.KvStats()
        check(LIB.llaisys_kv_stats(self._handle(), ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in s._fields_}

    def kv_reset_prefix_cache(self):
        return check(LIB.llaisys_kv_reset_prefix_cache(self._handle()))
