# The CPU speedrun's open track (docs/speedrun.md): the GPT-2 track's recipe (speedrun_cpu_gpt2.py) with rotary
# positions and QK-norm: nanoGPT's CPU recipe's test loss in 250 steps, 0.33 of its training time (the record table).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python train.py config/speedrun_cpu_open.py
base_config = "speedrun_cpu_gpt2.py"
out_dir = "out-speedrun-cpu-open"
pos_encoding = "rope"
qk_norm = True
max_iters = 250
