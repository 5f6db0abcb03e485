"""The engine level: LLM (offline generation, streaming, a caller-driven loop) over the
library's continuous-batching engine (llaisys.h, "The engine").

Requests reach the library as the OpenAI request bodies llaisys-server takes: a prompt string
or token ids become a /v1/completions body, chat messages a /v1/chat/completions body, and
SamplingParams' fields are the bodies' fields. So the library parses and checks them exactly as
the server does, and the same settings give the same tokens as `llaisys-cli generate`.
"""

import array
import base64
import ctypes
import dataclasses
import json
from typing import Dict, List, Optional, Union

from . import _lib
from ._lib import LIB, LlaisysError, check


@dataclasses.dataclass
class SamplingParams:
    """Sampling and stopping controls; None leaves a field to the library's policy (the model's
    generation_config.json, else the neutral value; see README). Ranges are checked by the
    library, which raises LlaisysError naming the field."""
    max_tokens: Optional[int] = 16
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    seed: Optional[int] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    repetition_penalty: Optional[float] = None
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    min_tokens: Optional[int] = None
    ignore_eos: Optional[bool] = None
    logit_bias: Optional[Dict[int, float]] = None
    logprobs: Optional[int] = None          # alternatives per token (0: the chosen one only)
    skip_special_tokens: Optional[bool] = None
    # constrained output, as OpenAI's: {"type": "json_object"} or {"type": "json_schema",
    # "json_schema": {"name": ..., "schema": {...}}} (README, "Structured output")
    response_format: Optional[dict] = None
    # or vLLM's structured outputs, as a dict of StructuredOutputsParams' fields: one of
    # {"json": schema}, {"regex": "..."}, {"choice": [...]}, {"json_object": True}
    structured_outputs: Optional[dict] = None

    def body(self, chat):
        """The request-body fields (chat: the chat-completions spelling of logprobs)."""
        b = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None or f.name == "logprobs":
                continue
            if f.name == "logit_bias":
                v = {str(k): x for k, x in v.items()}
            b[f.name] = v
        if self.logprobs is not None:
            if chat:
                b["logprobs"] = True
                b["top_logprobs"] = self.logprobs
            else:
                b["logprobs"] = self.logprobs
        return b


@dataclasses.dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    preemptions: int = 0

    @property
    def total_tokens(self):
        return self.prompt_tokens + self.completion_tokens


@dataclasses.dataclass
class Logprob:
    """One generated token's log-probability and the best alternatives [(id, logprob), ...]."""
    id: int
    logprob: float
    top: List[tuple]


@dataclasses.dataclass
class Delta:
    """What one poll of a request brought."""
    request_id: int
    token_ids: List[int]
    text: str
    reasoning: str = ""
    logprobs: Optional[List[Logprob]] = None
    state: str = "running"                 # waiting, running, preempted, finished
    finished: bool = False
    finish_reason: Optional[str] = None    # stop, length, cancelled, error
    stop_reason: Optional[Union[str, int]] = None  # the stop string, or the stop token id
    usage: Optional[Usage] = None          # with the finish
    error: Optional[str] = None


@dataclasses.dataclass
class RequestOutput:
    """A finished (or, from Request.output, a partial) request."""
    request_id: int
    text: str = ""
    token_ids: List[int] = dataclasses.field(default_factory=list)
    reasoning: str = ""
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[str, int]] = None
    usage: Usage = dataclasses.field(default_factory=Usage)
    logprobs: Optional[List[Logprob]] = None
    seed: Optional[int] = None

    @property
    def finished(self):
        return self.finish_reason is not None


def _request_body(prompt, params, extra=None):
    """The JSON body of a prompt: text or token ids (completions) or chat messages."""
    params = params or SamplingParams()
    if not isinstance(params, SamplingParams):
        raise TypeError("sampling params must be a SamplingParams, not %s"
                        % type(params).__name__)
    if isinstance(prompt, str):
        chat, body = False, {"prompt": prompt}
    elif isinstance(prompt, (list, tuple)) and prompt and all(isinstance(x, dict) for x in prompt):
        chat, body = True, {"messages": list(prompt)}
    elif isinstance(prompt, (list, tuple)) and all(isinstance(x, int) for x in prompt):
        chat, body = False, {"prompt": list(prompt)}
    else:
        raise TypeError("a prompt is a string, a list of token ids or a list of chat messages "
                        "(dicts), not %r" % (prompt,))
    body.update(params.body(chat))
    if extra:
        body.update(extra)
    return json.dumps(body)


class Request:
    """A submitted request (LLM.submit). poll() takes what is new; output holds everything so
    far. Poll from one thread at a time; cancel() from any."""

    def __init__(self, llm, handle):
        self._llm = llm
        self._h = handle
        self.id = LIB.llaisys_request_id(handle)
        self.output = RequestOutput(request_id=self.id)
        self._ev = _lib.Event()

    @property
    def state(self):
        if not self._h:
            return "finished"
        return _lib.STATES[check(LIB.llaisys_request_state(self._h, None))]

    @property
    def status(self):
        """(state, finish reason or None), now: ("running", None), ("finished", "stop")..."""
        if not self._h:
            return "finished", self.output.finish_reason
        f = ctypes.c_int32()
        st = check(LIB.llaisys_request_state(self._h, ctypes.byref(f)))
        return _lib.STATES[st], _lib.FINISH[f.value]

    @property
    def finished(self):
        return self.output.finished

    def poll(self, timeout=0.0):
        """A Delta with what is new (None when nothing came within timeout seconds)."""
        if not self._h:
            return None
        ev = self._ev
        got = check(LIB.llaisys_request_poll(self._h, timeout, ctypes.byref(ev)))
        if not got:
            return None
        ids = list(ev.ids[:ev.n_ids]) if ev.n_ids else []
        text = ctypes.string_at(ev.text, ev.text_len).decode("utf-8") if ev.text_len else ""
        reasoning = (ctypes.string_at(ev.reasoning, ev.reasoning_len).decode("utf-8")
                     if ev.reasoning_len else "")
        lps = None
        if ev.logprobs:
            k = ev.n_top
            lps = [Logprob(ids[i], ev.logprobs[i],
                           [(ev.top_ids[i * k + j], ev.top_logprobs[i * k + j]) for j in range(k)])
                   for i in range(ev.n_ids)]
        d = Delta(self.id, ids, text, reasoning, lps, _lib.STATES[ev.state])
        out = self.output
        out.token_ids.extend(ids)
        out.text += text
        out.reasoning += reasoning
        out.seed = ev.seed
        if lps is not None:
            out.logprobs = (out.logprobs or []) + lps
        if ev.finish:
            u = ev.usage
            usage = Usage(u.prompt_tokens, u.completion_tokens, u.cached_tokens,
                          u.reasoning_tokens, u.preemptions)
            d.finished = True
            d.finish_reason = out.finish_reason = _lib.FINISH[ev.finish]
            stop = (ev.stop_reason.decode() if ev.stop_reason
                    else ev.stop_token_id if ev.stop_token_id >= 0 else None)
            d.stop_reason = out.stop_reason = stop
            d.usage = out.usage = usage
            d.error = ev.error.decode() if ev.error else None
        return d

    def cancel(self):
        if self._h:
            LIB.llaisys_request_cancel(self._h)

    def release(self):
        if self._h:
            LIB.llaisys_request_release(self._h)
            self._h = None
            self._llm._live.pop(self.id, None)


class LLM(_lib.Handle):
    """An engine on a model directory.

    LLM(model_dir, **engine_options): the options are llaisys-server's engine flags without
    "--", with "_" for "-" (threads=2, ctx=4096, max_seqs=16, max_batch_tokens, max_queue,
    kv_blocks, kv_memory="512M", block_size, no_prefix_cache=True, exact=True, pooling="mean").
    The LLM steps its engine on the calling thread (generate, stream, step); thread=True gives
    the engine its own thread instead. Use it as a context manager, or call close().
    """

    _what = "LLM"

    def __init__(self, model_dir, *, thread=False, **engine_options):
        items = []
        for k, v in engine_options.items():
            if v is True:
                items.append(k)
            elif v is False or v is None:
                continue
            else:
                items.append("%s=%s" % (k, v))
        h = ctypes.c_void_p()
        check(LIB.llaisys_engine_create(str(model_dir).encode(), " ".join(items).encode(),
                                        ctypes.byref(h)))
        self._h = h
        self._live = {}
        self.threaded = False
        self.config = json.loads(_lib.take_string(LIB.llaisys_engine_describe(h)))
        if thread:
            check(LIB.llaisys_engine_start(h))
            self.threaded = True

    def _destroy(self, h):
        for r in list(self._live.values()):
            r.release()
        LIB.llaisys_engine_destroy(h)

    # ---- one call ----

    def generate(self, prompts, sampling_params=None):
        """Run prompts (a string, token ids, or a list of either) to completion; returns one
        RequestOutput per prompt, in order. sampling_params: one SamplingParams for all, or a
        list with one per prompt. Raises LlaisysError for a request the library refuses."""
        if isinstance(prompts, str) or (isinstance(prompts, (list, tuple)) and prompts and
                                        all(isinstance(x, int) for x in prompts)):
            prompts = [prompts]
        return self._generate([(p, None) for p in prompts], sampling_params)

    def chat(self, messages, sampling_params=None, chat_template_kwargs=None):
        """One chat conversation (a list of {"role", "content"} dicts, or a list of such lists)
        through the model's chat template; RequestOutput(s) with the answer in text and the
        reasoning (DeepSeek-R1 style <think>) in reasoning."""
        many = bool(messages) and isinstance(messages[0], (list, tuple))
        convs = messages if many else [messages]
        extra = {"chat_template_kwargs": chat_template_kwargs} if chat_template_kwargs else None
        outs = self._generate([(list(c), extra) for c in convs], sampling_params)
        return outs if many else outs[0]

    def embed(self, inputs, dimensions=None):
        """Embeddings of inputs (a string, token ids, or a list of either): one list of floats
        per input, in order, pooled from the model's final hidden states as the engine option
        pooling, else the model directory's sentence-transformers files, say (else the last
        position, L2-normalized); dimensions keeps the first values, normalized again. The
        library batches the inputs with whatever else its engine runs."""
        if isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and inputs and
                                       all(isinstance(x, int) for x in inputs)):
            inputs = [inputs]
        body = {"input": list(inputs), "encoding_format": "base64"}
        if dimensions is not None:
            body["dimensions"] = dimensions
        out = ctypes.c_void_p()
        check(LIB.llaisys_engine_embed(self._handle(), json.dumps(body).encode(),
                                       ctypes.byref(out)))
        data = json.loads(_lib.take_string(out))["data"]
        return [list(array.array("f", base64.b64decode(d["embedding"]))) for d in data]

    def rerank(self, query, documents, top_n=None, instruction=None):
        """The documents (strings) ranked by their relevance to query: a list of
        (index, score) pairs, best first (score in [0, 1]; a tie: the lower index first), the
        first top_n of them (None: all). The model's relevance head scores each document put
        with the query into its reranking prompt (instruction: Qwen3-Reranker's <Instruct>,
        None for its default); the head is a sequence-classification checkpoint's
        score.weight, else the next-token logits of the engine option rerank_tokens="no,yes",
        else of no,yes for a directory whose README.md names Qwen3-Reranker."""
        body = {"query": query, "documents": list(documents)}
        if top_n is not None:
            body["top_n"] = top_n
        if instruction is not None:
            body["instruction"] = instruction
        out = ctypes.c_void_p()
        check(LIB.llaisys_engine_rerank(self._handle(), json.dumps(body).encode(),
                                        ctypes.byref(out)))
        results = json.loads(_lib.take_string(out))["results"]
        return [(r["index"], r["relevance_score"]) for r in results]

    def _generate(self, items, sampling_params):
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != len(items):
                raise ValueError("%d prompts but %d sampling params"
                                 % (len(items), len(sampling_params)))
            params = list(sampling_params)
        else:
            params = [sampling_params] * len(items)
        bodies = "[" + ",".join(_request_body(p, sp, extra)
                                for (p, extra), sp in zip(items, params)) + "]"
        out = ctypes.c_void_p()
        check(LIB.llaisys_engine_generate(self._handle(), bodies.encode(), ctypes.byref(out)))
        results = json.loads(_lib.take_string(out))
        outputs = []
        for i, r in enumerate(results):
            if "error" in r and isinstance(r["error"], dict):
                names = {LIB.llaisys_status_str(c).decode(): c for c in range(-12, 0)}
                raise LlaisysError(names.get(r["error"]["status"], _lib.ERR_INTERNAL),
                                   r["error"]["message"])
            u = r["usage"]
            lps = None
            if "logprobs" in r:
                lps = [Logprob(x["id"], x["logprob"], [tuple(t) for t in x["top_logprobs"]])
                       for x in r["logprobs"]]
            outputs.append(RequestOutput(
                request_id=i, text=r["text"], token_ids=r["token_ids"],
                reasoning=r.get("reasoning", ""), finish_reason=r["finish_reason"],
                stop_reason=r.get("stop_reason", r.get("stop_token_id")),
                usage=Usage(u["prompt_tokens"], u["completion_tokens"], u["cached_tokens"],
                            u["reasoning_tokens"], u["preemptions"]),
                logprobs=lps, seed=r["seed"]))
        return outputs

    # ---- streaming ----

    def stream(self, prompt, sampling_params=None):
        """Generate one prompt (text, ids or chat messages), yielding a Delta for every poll
        that brought something; the last one has finished=True. Closing the generator early
        cancels the request."""
        r = self.submit(prompt, sampling_params)
        try:
            while True:
                if not self.threaded:
                    self.step()
                d = r.poll(0.0 if not self.threaded else 0.05)
                if d is not None:
                    yield d
                    if d.finished:
                        return
        finally:
            r.release()

    # ---- the caller's loop ----

    def submit(self, prompt, sampling_params=None):
        """Queue one request (text, token ids or chat messages); returns its Request."""
        body = _request_body(prompt, sampling_params)
        h = ctypes.c_void_p()
        check(LIB.llaisys_engine_submit(self._handle(), body.encode(), ctypes.byref(h)))
        r = Request(self, h)
        self._live[r.id] = r
        return r

    def step(self):
        """One engine step on this thread; True when anything was computed or finished."""
        did = ctypes.c_int32()
        check(LIB.llaisys_engine_step(self._handle(), ctypes.byref(did)))
        return bool(did.value)

    def has_work(self):
        return bool(LIB.llaisys_engine_has_work(self._handle()))

    def collect(self, timeout=0.0):
        """Poll every submitted, unreleased request; returns the Deltas that came. Finished
        requests are released (their Request.output stays)."""
        out = []
        for r in list(self._live.values()):
            d = r.poll(timeout)
            if d is not None:
                out.append(d)
                if d.finished:
                    r.release()
        return out

    def run(self):
        """Step until nothing is left to do; returns every Delta collected on the way."""
        out = self.collect()
        while self.has_work() or self._live:
            if not self.threaded:
                self.step()
            got = self.collect(0.0 if not self.threaded else 0.05)
            out.extend(got)
        return out

    def cancel(self, request):
        request.cancel()

    def stats(self):
        s = _lib.EngineStats()
        check(LIB.llaisys_engine_stats(self._handle(), ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in s._fields_}

    def reset_prefix_cache(self):
        check(LIB.llaisys_engine_reset_prefix_cache(self._handle()))
