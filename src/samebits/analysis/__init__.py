"""Analysis tools: the exhaustive model checker of the engine core (no torch, no numpy)."""
