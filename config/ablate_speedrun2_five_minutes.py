# The CPU speedrun's five-minute table, round two (docs/speedrun.md, step 5): each track's round-two pick with the
# steps that fit 290 s of training on this machine, on TEST, seeds 1347..1351 (round two's record seeds, as round one's
# five-minute table used its records' 1342..1346). The shape of each was chosen on val
# (config/ablate_speedrun2_five_minutes_search.py, seeds 200100 and 200101): the pick's own 4 x 128 in both tracks
# (GPT-2: 1.7178 against 1.7691 at 6 x 192; open: 1.7038 against 1.7444). --max_seconds=300 is only
# a guard: a run it stops shows fewer steps than its recipe in the table.
# python ablate.py config/ablate_speedrun2_five_minutes.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the cells below change it
study_dir = "docs/speedrun2_five_minutes"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True max_iters=2852",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 max_iters=2578",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "GPT-2 track: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True max_iters=2852",
    "open track: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 "
    "qk_norm=True warmup_iters=30 max_iters=2578",
]
max_seconds = 300.0  # a guard, not the budget: the budget is each cell's steps
seeds = 5
first_seed = 1347  # round two's record seeds; the target used 1337..1341, the search 200000 on
eval_split = "test"
target_loss = 1.8599327404469619  # T, for the table beside it: each cell its own steps
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
jobs = 1
threads = 0
