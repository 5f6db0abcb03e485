"""llaisys: LLM inference on CPUs, from Python (ctypes over libllaisys.so).

    from llaisys import LLM, SamplingParams
    llm = LLM("models/qwen2-small-random", threads=2)
    out = llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=32))[0]
    print(out.text, out.token_ids, out.finish_reason, out.usage)

LLM (engine level: generate, chat, stream, submit/step/collect/cancel/close), SamplingParams,
and Model (model level: decode batches of many sequences, logits, kv_seq_* operations).
Errors raise LlaisysError with the library's message.
"""

from ._lib import LlaisysError
from .engine import LLM, Delta, Logprob, Request, RequestOutput, SamplingParams, Usage
from .model import Model

__all__ = ["LLM", "SamplingParams", "Model", "LlaisysError", "Request", "RequestOutput", "Delta",
           "Logprob", "Usage"]
__version__ = "1.0"
