# Does bfloat16 autocast train the CPU baby model as well as float32? It is the faster setting on a CPU with native
# bfloat16 (AVX512-BF16 or AMX; bench.py's "+ bfloat16 autocast" row); this pairs the two by seed at the baby
# config's own budget (config/train_shakespeare_char_cpu.py), compiled as bench.py times it.
# python data/shakespeare_char/prepare.py --input=PATH   (or with network, no --input)
# python ablate.py config/ablate_dtype.py
study_dir = "out-ablate-dtype"
variants = ["dtype=float32", "dtype=bfloat16"]
seeds = 4
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
eval_batch_size = 64
threads = 1  # one run at a time on one core: the machine's other core stays free

dataset = "shakespeare_char"
eval_interval = 250
eval_iters = 20
log_interval = 10
device = "cpu"
compile = True

batch_size = 12
n_layer = 4
n_head = 4
n_embd = 128
block_size = 64
dropout = 0.0

learning_rate = 1e-3
max_iters = 2000
lr_decay_iters = 2000
min_lr = 1e-4
beta2 = 0.99
warmup_iters = 100
