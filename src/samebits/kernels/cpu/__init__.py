"""CPU kernels: batch-invariant (`invariant`) and stock-torch (`fast`) implementations."""
