# Stage 2 of the CPU speedrun's search (docs/speedrun.md), GPT-2 track: batch and shape, from stage 1's pick (Muon
# at 0.01 with AdamW at 3e-3 and wsd, which reached at 1000 steps in 77.1 s; docs/speedrun_search_optimizer/). On VAL,
# seed 200000, wsd budgets 125, 250, 500 and 1000 steps, at batch 12, 24 and 48 of the baby model (4 x 128) and of a
# wider one (6 layers x 6 heads x 192). The rates stay stage 1's.
# The rule, fixed here before any run (docs/speedrun.md, "The search"): T_val is stage 1's, 1.9420790462342166
# (nanoGPT's recipe at 2000 steps, val, seed 200000); a (cell, budget) reaches when its val loss is at most
# T_val - 0.02; the pick is the reaching (cell, budget) of least training time. If none reaches, stage 1's pick stands.
# python ablate.py config/ablate_speedrun_search_batch.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the lines below are the study's
study_dir = "docs/speedrun_search_batch"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=12",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=48",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=12 n_layer=6 "
    "n_head=6 n_embd=192",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 n_layer=6 "
    "n_head=6 n_embd=192",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=48 n_layer=6 "
    "n_head=6 n_embd=192",
]
seeds = 1
first_seed = 200000  # the records use 1337..1346
eval_split = "val"
budgets = [125, 250, 500, 1000]
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
jobs = 1
threads = 0
