# Stage 1 of the CPU speedrun's search (docs/speedrun.md), GPT-2 track: the optimizer, its rates and the schedule,
# on VAL, on a seed no record uses (200000), at the baseline's model and batch. Each wsd cell trains one constant-rate
# run with decay branches to 250, 500, 1000 and 2000 steps; nanoGPT's recipe (the first cell) trains a cosine to each.
# The rule, fixed here before any run (docs/speedrun.md, "The search"):
# - T_val is the first cell's val loss at 2000 steps (nanoGPT's recipe as it is, this seed);
# - a (cell, budget) reaches when its val loss is at most T_val - 0.02 (what 5 test seeds need for p < 0.01);
# - the pick is the reaching (cell, budget) of least training time; stage 2 starts from it. If none reaches, the
#   cell with the lowest val loss at 2000 steps goes on at 2000.
# Muon's cells keep AdamW at 3e-3 for the tables, the head, norms and biases (the position study's rate for learned
# at 2000 steps) and try Muon's own rate around Keller Jordan's 0.02.
# python ablate.py config/ablate_speedrun_search.py
# python ablate.py config/ablate_speedrun_search.py --report_only=True --target_loss=T_val   (the table of times)
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the lines below are the study's
study_dir = "docs/speedrun_search_optimizer"  # its records are committed there (checkpoints are not)
variants = [
    "learned",
    "learned lr_schedule=wsd learning_rate=0.001",
    "learned lr_schedule=wsd learning_rate=0.003",
    "learned lr_schedule=wsd learning_rate=0.01",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.05",
]
seeds = 1
first_seed = 200000  # the records use 1337..1346
eval_split = "val"
budgets = [250, 500, 1000, 2000]
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
reference = "learned"
jobs = 1
threads = 0
