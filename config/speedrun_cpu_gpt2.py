# The CPU speedrun's GPT-2 track (docs/speedrun.md): the GPT-2 model of the baby config (learned positions, tied head,
# GELU, LayerNorm), trained with Muon for the blocks' matrices and AdamW for the rest, warmup-stable-decay, batch 24,
# for 500 steps. It reaches nanoGPT's CPU recipe's test loss in 0.60 of its training time (the record table).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python train.py config/speedrun_cpu_gpt2.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe; the lines below are the search's picks
out_dir = "out-speedrun-cpu-gpt2"
optimizer = "muon"
muon_learning_rate = 0.01
learning_rate = 3e-3  # AdamW's, for the token and position tables, norms and biases
min_lr = 1e-4 * learning_rate / 1e-3  # nanoGPT's depth of decay, a tenth of the peak (as ablate.py scales it)
lr_schedule = "wsd"
batch_size = 24
max_iters = 500
