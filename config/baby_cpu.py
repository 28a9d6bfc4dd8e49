# The baby model on a CPU, written once: character-level Shakespeare, 4 layers of width 128, context 64 (about
# 0.8M parameters), 2000 steps. The configs that train it build on this file with a first line
# base_config = "baby_cpu.py" and hold only what they change (train_shakespeare_char_cpu.py, the studies).
dataset = "shakespeare_char"
eval_interval = 250
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
max_iters = 2000
lr_decay_iters = 2000
min_lr = 1e-4
beta2 = 0.99
warmup_iters = 100
