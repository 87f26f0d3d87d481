"""CUDA graphs for decode steps: which steps replay and the padded buckets (`policy`, torch-free,
read by the engine's assembly), static inputs (`decode_buffers`), captured step functions
(`step_graph`) and the per-bucket runner (`runner`). This `__init__` imports nothing, so the
torch-free engine core may import `samebits.graphs.policy` without torch."""
