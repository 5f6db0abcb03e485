"""python3 -m llaisys.bench: what the Python path costs over the C engine.

The same workload (S streams, each a P-token prompt of fixed pseudo-random ids and G greedy
new tokens with eos ignored, all submitted at once) runs three ways on one engine:
  C       LLM.generate: one call, the library steps and collects in C (llaisys_engine_generate);
  loop    LLM.submit, then LLM.step + LLM.collect from Python until done (a Python poll of
          every request after every step);
  stream  LLM.stream, one stream only (a generator step, poll and Delta per token).
Each prints its best wall time over --repeat rounds (a round runs every path once, so a change
of load hits them all), generated tokens/s, the ratio to the C path, and for the Python paths
the share of the wall time spent outside the library's steps (Python's own work: submitting,
polling, building deltas), which load on a shared machine disturbs far less than the wall
time. The prefix cache is
off and every run has its own prompts, so no run helps another. Timings on a shared machine
are noisy: compare ratios taken back to back.

usage: python3 -m llaisys.bench --model DIR [--streams 1,16] [--prompt 128] [--gen 32]
                                [--repeat 1] [--threads N] [any engine option as --name value]
"""

import argparse
import sys
import time

from . import LLM, SamplingParams


def prompts(n, length, salt):
    return [[(salt * 7919 + s * 104729 + i * 31337) % 150000 for i in range(length)]
            for s in range(n)]


class _Timed:
    """llm.step, timed: the seconds spent inside the library's step."""

    def __init__(self, llm):
        self.llm, self.inside = llm, 0.0
        self.step = llm.step

    def __call__(self):
        t = time.perf_counter()
        did = self.step()
        self.inside += time.perf_counter() - t
        return did


def run(llm, path, S, P, G, salt):
    """Wall seconds, tokens, and the seconds outside the library's steps (Python's share; None
    for the C path, which never returns to Python)."""
    params = SamplingParams(temperature=0, max_tokens=G, ignore_eos=True)
    ps = prompts(S, P, salt)
    timed = _Timed(llm)
    llm.step = timed
    t0 = time.perf_counter()
    try:
        if path == "C":
            outs = llm.generate(ps, params)
            n = sum(len(o.token_ids) for o in outs)
        elif path == "loop":
            reqs = [llm.submit(p, params) for p in ps]
            while llm.has_work():
                llm.step()
                llm.collect()
            llm.collect()
            n = sum(len(r.output.token_ids) for r in reqs)
        else:
            n = sum(len(d.token_ids) for d in llm.stream(ps[0], params))
    finally:
        del llm.step
    wall = time.perf_counter() - t0
    assert n == S * G, (path, n, S * G)
    return wall, n, None if path == "C" else wall - timed.inside


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m llaisys.bench",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", default="1,16")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    args, extra = ap.parse_known_args(argv)
    opts = {}
    for i in range(0, len(extra), 2):
        if not extra[i].startswith("--") or i + 1 >= len(extra):
            ap.error("engine options are --name value pairs, got %r" % extra[i:])
        opts[extra[i][2:].replace("-", "_")] = extra[i + 1]
    streams = [int(s) for s in args.streams.split(",")]
    S_max = max(streams)
    opts.setdefault("ctx", args.prompt + args.gen + 8)
    opts.setdefault("max_seqs", S_max)
    opts.setdefault("kv_blocks", S_max * ((args.prompt + args.gen + 15) // 16 + 1))
    with LLM(args.model, threads=args.threads, no_prefix_cache=True, **opts) as llm:
        run(llm, "C", 1, 8, 2, 0)  # warm-up: page in the weights
        print("model %s, %d threads, prompt %d, gen %d" % (args.model, args.threads, args.prompt,
                                                            args.gen))
        print("| streams | path | wall s | tokens/s | vs C | outside the steps |")
        print("| ---: | --- | ---: | ---: | ---: | ---: |")
        salt = 1
        for S in streams:
            paths = ["C", "loop", "stream"] if S == 1 else ["C", "loop"]
            best, share = {}, {}
            for _ in range(args.repeat):  # rounds of every path, so load changes hit all
                for path in paths:
                    salt += 1
                    w, n, out = run(llm, path, S, args.prompt, args.gen, salt)
                    if w < best.get(path, float("inf")):
                        best[path] = w
                        share[path] = out
            base = n / best["C"]
            for path in paths:
                rate = n / best[path]
                o = share[path]
                print("| %d | %s | %.2f | %.1f | %.3f | %s |" % (
                    S, path, best[path], rate, rate / base,
                    "-" if o is None else "%.1f%% (%.0f us a token)" % (
                        100 * o / best[path], 1e6 * o / n)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
