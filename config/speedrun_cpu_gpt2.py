# The CPU speedrun's GPT-2 track (docs/speedrun.md): the GPT-2 model of the baby config (learned positions, tied head,
# GELU, LayerNorm), trained with Muon (NorMuon's normalisation, no warmup) for the blocks' matrices and AdamW for the
# rest, warmup-stable-decay, batch 24, for 350 steps: round two's record (the record table).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python train.py config/speedrun_cpu_gpt2.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe; the lines below are the search's picks
out_dir = "out-speedrun-cpu-gpt2"
optimizer = "muon"
muon_learning_rate = 0.02
normuon = True
learning_rate = 3e-3  # AdamW's, for the token and position tables, norms and biases
min_lr = 1e-4 * learning_rate / 1e-3  # nanoGPT's depth of decay, a tenth of the peak (as ablate.py scales it)
lr_schedule = "wsd"
warmup_iters = 0
batch_size = 24
max_iters = 350
dataset = "shakespeare_char"
eval_interval = 250
eval_iters = 20
log_interval = 10
device = "cpu"
compile = False
