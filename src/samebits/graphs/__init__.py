"""CUDA graphs for decode steps (torch side): static inputs (`decode_buffers`), captured step
functions (`step_graph`) and the per-bucket runner (`runner`). Which steps replay is decided by
the torch-free `samebits.engine.graph_policy`; the engine core never imports this package."""
