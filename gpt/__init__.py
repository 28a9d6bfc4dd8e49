"""The architecture: GPTConfig and GPT with its InputLayer (model.py), the position encodings (positions.py),
context extension (extend.py), the sampler (generate.py) with the CPU fast path it opts into, and GPT-2's
weights in and out (gpt2_weights.py)."""
