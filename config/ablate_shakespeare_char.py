# Position-encoding study on character-level Shakespeare, sized for a 2-core CPU: 3 variants x 3 seeds in ~30 min
# (measured: 33 min at 10-12 steps/s on a 2-core machine shared with other jobs).
# python data/shakespeare_char/prepare.py --input=PATH   (or with network, no --input)
# python ablate.py config/ablate_shakespeare_char.py
study_dir = "out-ablate-shakespeare-char"
variants = ["learned", "sinusoidal", "none"]
seeds = 3
eval_multipliers = [0.25, 0.5, 1.0, 1.5, 2.0, 4.0]
eval_windows = 512
eval_batch_size = 64
# One thread: on a 2-core CPU shared with other jobs, two OpenMP threads ran 1.5-4x slower than one (measured).
threads = 1

dataset = "shakespeare_char"
eval_interval = 200
eval_iters = 20
log_interval = 10
device = "cpu"
compile = False

batch_size = 12
n_layer = 4
n_head = 4
n_embd = 128
block_size = 64
dropout = 0.0

learning_rate = 1e-3
max_iters = 2500  # 9 runs of 200-250 s each, plus ~10 s of evaluation each
lr_decay_iters = max_iters
min_lr = 1e-4
beta2 = 0.99
warmup_iters = 100
