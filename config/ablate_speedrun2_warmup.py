# The CPU speedrun, round two, first step (docs/speedrun.md): round one's picks at budgets under and between the ones
# it tried, with a shorter warmup (100 of a 250-step run is 40% of it) and one rate raised at a time. On VAL, 2 seeds
# of its own (200100, 200101; round one searched on 200000, the records use 1337..1346), wsd budgets 150 to 500.
# The rule, fixed here before any run: T_val is round one's, 1.9420790462342166 (nanoGPT's recipe at 2000 steps, val,
# seed 200000). A (cell, budget) reaches when the mean val loss of its 2 seeds is at most T_val - 0.02. Within a
# track every cell has the same batch, shape and work a step (they differ only in schedule constants and rates), so
# a track's pick is its reaching (cell, budget) of fewest steps, ties going to the lower mean val loss. A pick at the
# edge of a grid (the smallest budget, the shortest warmup, the highest rate) sends the next step past that edge.
# python ablate.py config/ablate_speedrun2_warmup.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the lines below are the study's
study_dir = "docs/speedrun2_warmup"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 warmup_iters=30",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 warmup_iters=30",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 warmup_iters=30",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 qk_norm=True",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 qk_norm=True "
    "warmup_iters=30",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "GPT-2 track, round one's pick (warmup 100): learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.01 batch_size=24",
    "GPT-2 track, warmup 30: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 "
    "batch_size=24 warmup_iters=30",
    "GPT-2 track, warmup 30, Muon 0.02: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 warmup_iters=30",
    "GPT-2 track, warmup 30, AdamW 0.01: learned lr_schedule=wsd optimizer=muon learning_rate=0.01 "
    "muon_learning_rate=0.01 batch_size=24 warmup_iters=30",
    "open track, round one's pick (warmup 100): rope lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.01 batch_size=24 qk_norm=True",
    "open track, warmup 30: rope lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30",
    "open track, warmup 30, Muon 0.02: rope lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 qk_norm=True warmup_iters=30",
    "open track, warmup 30, AdamW 0.01: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 "
    "muon_learning_rate=0.01 batch_size=24 qk_norm=True warmup_iters=30",
]
seeds = 2
first_seed = 200100
eval_split = "val"
budgets = [150, 175, 200, 250, 300, 375, 450, 500]
target_loss = 1.9420790462342166  # T_val
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
jobs = 1
threads = 1  # one thread: on the busy 2-core machine two threads stalled each other (10 steps in 100 s, measured)
