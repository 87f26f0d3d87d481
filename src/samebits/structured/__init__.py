"""Structured outputs: constrain a request's tokens to a JSON schema, a regex, a choice list
or a context-free grammar (llguidance), as a pure function of the grammar and the prefix.

`StructuredOutputsParams` (the spec, part of the sampler state and of the audit log),
`GrammarTokenizer` (llguidance's view of the deployment's tokenizer), `GrammarMatcher` (one
per request) and `grammar_step` (the mask after a prefix, from scratch).
"""

from samebits.structured.params import StructuredOutputsParams

__all__ = ["StructuredOutputsParams"]
