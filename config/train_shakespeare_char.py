# nanoGPT's "baby GPT" on Tiny Shakespeare characters, sized for a GPU: 10.7M parameters, ~3 minutes on an A100.
# python data/shakespeare_char/prepare.py && python train.py config/train_shakespeare_char.py
out_dir = "out-shakespeare-char"
dataset = "shakespeare_char"
eval_interval = 250
eval_iters = 200
log_interval = 10

gradient_accumulation_steps = 1
batch_size = 64
block_size = 256

n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2

learning_rate = 1e-3
max_iters = 5000
lr_decay_iters = 5000
min_lr = 1e-4
beta2 = 0.99
warmup_iters = 100
