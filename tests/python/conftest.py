"""pytest set-up for the Python package's tests: the package from python/ (or $PYTHONPATH),
the library from $LLAISYS_LIBRARY (make test passes it), paths of the fixtures and the CLI."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

TINY = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen2")
MOCK = os.path.join(ROOT, "tests", "fixtures", "mock")
CLI = os.environ.get("LLAISYS_CLI", os.path.join(ROOT, "llaisys-cli"))


@pytest.fixture(scope="module")
def tiny_llm():
    from llaisys import LLM
    with LLM(TINY, threads=1, ctx=512, max_seqs=8) as llm:
        yield llm


def argmax(row):
    return max(range(len(row)), key=row.__getitem__)
