# Position study on character-level Shakespeare: five encodings (sinusoidal at the amplitude that
# config/ablate_positions_sweep.py picked, 0.1, and at Vaswani's 1.0), 10 seeds each, both eval protocols at 1x..4x.
# Budget: 1000 steps per run, set by the ~2 hours this 2-core CPU had next to other jobs. Measured: 60 runs,
# 84.9 min of training and 25.9 min of evaluation (sums over runs), 82 min of wall time in two processes.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_positions.py
base_config = "baby_cpu.py"  # the baby model; the lines below change it
study_dir = "out-ablate-positions"
variants = ["learned", "sinusoidal sinusoidal_amplitude=0.1", "sinusoidal sinusoidal_amplitude=1.0", "rope",
            "alibi", "none"]
seeds = 10
eval_multipliers = [1.0, 2.0, 4.0]
protocols = ["nonoverlapping", "sliding"]
sliding_window = 64  # block_size: no token sees more context than in training
sliding_stride = 32  # so a token past position 64 has 32..63 tokens of context (16: 48..63, but 1.4x the eval time)
eval_batch_size = 64
reference = "learned"
# One thread: on a 2-core CPU shared with other jobs, two OpenMP threads ran 1.5-4x slower than one (measured).
threads = 1

eval_interval = 200
max_iters = 1000
lr_decay_iters = max_iters
