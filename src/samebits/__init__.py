"""samebits: LLM inference with bit-for-bit reproducible logits.

Public names follow vLLM: `LLM`, `SamplingParams`, `RequestOutput`, `CompletionOutput`,
`StructuredOutputsParams` (`SamplingParams.structured_outputs`).
"""

from samebits.outputs import CompletionOutput, RequestOutput
from samebits.sampling import SamplingParams
from samebits.structured import StructuredOutputsParams

__version__ = "0.1.0"
__all__ = [
    "LLM",
    "CompletionOutput",
    "RequestFailedError",
    "RequestOutput",
    "SamplingParams",
    "StructuredOutputsParams",
    "__version__",
]


def __getattr__(name: str):
    if name in ("LLM", "RequestFailedError"):  # lazy: importing samebits must not pull torch
        from samebits import llm

        return getattr(llm, name)
    raise AttributeError(name)
