"""Types, building blocks, tracing, intrinsics and the canonical reduction."""
