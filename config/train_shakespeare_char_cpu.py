# A character-level Shakespeare model sized for a laptop CPU: about 0.8M parameters, a few minutes.
# python data/shakespeare_char/prepare.py --input=PATH   (or with network, no --input)
# python train.py config/train_shakespeare_char_cpu.py
out_dir = "out-shakespeare-char-cpu"
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
