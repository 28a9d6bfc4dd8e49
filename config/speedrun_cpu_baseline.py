# The CPU speedrun's baseline (docs/speedrun.md): nanoGPT's CPU recipe as its README gives it (AdamW at 1e-3 with a
# cosine to 1e-4 over 2000 steps, batch 12 x 64, 4 layers x 4 heads x 128) on Tiny Shakespeare characters. Its mean
# test loss over 5 seeds is the speedrun's target, its training time the time to beat.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python train.py config/speedrun_cpu_baseline.py
base_config = "baby_cpu.py"  # the recipe itself; the line below only names the run's folder
out_dir = "out-speedrun-cpu-baseline"
