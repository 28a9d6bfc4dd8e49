# Does the learned position table start better at init std 0.01 than at 0.02? llm.c found 0.01 better in all
# 10 seeds (paired p = 0.0014, 500 steps at T=64); this repeats it on character-level Shakespeare, paired by seed.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_init_std.py
base_config = "baby_cpu.py"  # the baby model; the lines below change it
study_dir = "out-ablate-init-std"
variants = ["learned_init_std=0.01", "learned_init_std=0.02"]
seeds = 10
eval_multipliers = [1.0]  # a learned table has no rows past block_size
protocols = ["nonoverlapping"]
eval_batch_size = 64
# One thread: on a 2-core CPU shared with other jobs, two OpenMP threads ran 1.5-4x slower than one (measured).
threads = 1

eval_interval = 100
pos_encoding = "learned"
max_iters = 500  # llm.c's budget; 20 runs
lr_decay_iters = max_iters
