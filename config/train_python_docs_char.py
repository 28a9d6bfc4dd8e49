# The quick start: a small character model of Python's own documentation, on a CPU in a few minutes.
# python data/python_docs_char/prepare.py && python train.py config/train_python_docs_char.py
out_dir = "out-python-docs-char"
dataset = "python_docs_char"
eval_interval = 250
eval_iters = 20
log_interval = 10
device = "cpu"
compile = False

batch_size = 12
block_size = 64
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0

learning_rate = 1e-3
max_iters = 2000
lr_decay_iters = 2000
min_lr = 1e-4
beta2 = 0.99
warmup_iters = 100
