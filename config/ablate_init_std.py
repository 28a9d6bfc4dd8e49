# Does the learned position table start better at init std 0.01 than at 0.02? llm.c found 0.01 better in all
# 10 seeds (paired p = 0.0014, 500 steps at T=64); this repeats it on character-level Shakespeare, paired by seed.
# python data/shakespeare_char/prepare.py --input=PATH   (or with network, no --input)
# python ablate.py config/ablate_init_std.py
study_dir = "out-ablate-init-std"
variants = ["learned_init_std=0.01", "learned_init_std=0.02"]
seeds = 10
eval_multipliers = [1.0]  # a learned table has no rows past block_size
protocols = ["nonoverlapping"]
eval_batch_size = 64
# One thread: on a 2-core CPU shared with other jobs, two OpenMP threads ran 1.5-4x slower than one (measured).
threads = 1

dataset = "shakespeare_char"
eval_interval = 100
eval_iters = 20
log_interval = 10
device = "cpu"
compile = False

pos_encoding = "learned"
batch_size = 12
n_layer = 4
n_head = 4
n_embd = 128
block_size = 64
dropout = 0.0

learning_rate = 1e-3
max_iters = 500  # llm.c's budget; 20 runs
lr_decay_iters = max_iters
min_lr = 1e-4
beta2 = 0.99
warmup_iters = 100
