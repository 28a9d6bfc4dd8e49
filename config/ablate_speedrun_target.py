# Stage 0 of the CPU speedrun (docs/speedrun.md): the target. nanoGPT's CPU recipe (config/speedrun_cpu_baseline.py)
# on 5 seeds, 1337..1341, scored on TEST at L = block_size; their mean is the target every recipe must reach. One
# run at a time on both cores (jobs 1, torch's own threads), on an idle machine: its times are the baseline's too.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_speedrun_target.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the lines below are the study's
study_dir = "docs/speedrun_target"  # its records are committed there (checkpoints are not)
variants = ["learned"]
seeds = 5
first_seed = 1337
eval_split = "test"
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
jobs = 1
threads = 0
