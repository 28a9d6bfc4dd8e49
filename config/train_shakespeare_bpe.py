# A small GPT-2-tokenized (BPE) model of Tiny Shakespeare, trained from scratch; sized for one GPU.
# python data/shakespeare/prepare.py && python train.py config/train_shakespeare_bpe.py
out_dir = "out-shakespeare-bpe"
dataset = "shakespeare"
eval_interval = 250
eval_iters = 100
log_interval = 10

batch_size = 32
block_size = 256
n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2

learning_rate = 6e-4
max_iters = 3000
lr_decay_iters = 3000
min_lr = 6e-5
warmup_iters = 200
