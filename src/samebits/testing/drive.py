"""Driving an `LLMEngine` in tests and benchmarks."""

from __future__ import annotations


def run_until_done(engine) -> dict:
    """Step `engine` until no request is unfinished; the final output of each request that
    finished in those steps, by request id (in finishing order)."""
    finished = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                finished[out.request_id] = out
    return finished
