"""An unbounded proof of the engine protocol, and its tie to the code (docs/engine_proof.md).

Modules, one concern each:
  logic.py          one vocabulary, two interpretations: Z3 terms (proof) and Python values
                    (refinement check)
  state.py          the abstract state (requests, blocks, tables, ref counts, KV contents as
                    prefix values, chained hashes, the hash map, the free set)
  transitions.py    the protocol's transitions (guard + update)
  invariant.py      the invariant, stated once, as named conjuncts
  obligations.py    initial-state and preservation obligations, and the trusted axioms
  prover.py         discharges obligations with Z3 (unbounded: any number of requests,
                    blocks, tokens, any chunk length, any block size)
  counterexample.py bounded, quantifier-free counterexamples for failing obligations
  mutants.py        planted protocol bugs the proof must reject
  refinement.py     maps the real Scheduler / KVCacheManager / BlockPool state to the abstract
                    state and checks each real step is a sequence of proved transitions
Evidence class: proof (Z3) of the abstract protocol; bounded refinement check of the code.
"""
