"""samebits: LLM inference with bit-for-bit reproducible logits.

Public names follow vLLM: `LLM`, `SamplingParams`, `RequestOutput`, `CompletionOutput`.
"""

from samebits.outputs import CompletionOutput, RequestOutput
from samebits.sampling import SamplingParams

__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "__version__"]


def __getattr__(name: str):
    if name == "LLM":  # lazy: importing samebits must not pull torch
        from samebits.llm import LLM

        return LLM
    raise AttributeError(name)
