# The CPU speedrun's open track (docs/speedrun.md): the baby config's model with rotary positions and QK-norm, trained
# with Muon for the blocks' matrices and AdamW for the rest, warmup-stable-decay, batch 24, for 250 steps: round
# two's record (the record table).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python train.py config/speedrun_cpu_open.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe; the lines below are the search's picks
out_dir = "out-speedrun-cpu-open"
pos_encoding = "rope"
qk_norm = True
optimizer = "muon"
muon_learning_rate = 0.01
learning_rate = 0.01  # AdamW's, for the token table, norms and biases
min_lr = 1e-4 * learning_rate / 1e-3  # nanoGPT's depth of decay, a tenth of the peak (as ablate.py scales it)
lr_schedule = "wsd"
warmup_iters = 30
batch_size = 24
max_iters = 250
dataset = "shakespeare_char"
eval_interval = 250
eval_iters = 20
log_interval = 10
device = "cpu"
compile = False
