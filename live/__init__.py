"""Live batched speculative decoding on real models, sharing the simulator's policies."""
