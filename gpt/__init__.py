"""What is done with a GPT (model.py), above it: the sampler (generate.py) with the CPU fast path it opts into
(fast_decode.py), context extension (extend.py), and GPT-2's weights in and out (gpt2_weights.py)."""
