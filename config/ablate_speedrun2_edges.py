# The CPU speedrun, round two, second step (docs/speedrun.md): past the edges of the first step's grid. Its picks
# (docs/speedrun2_warmup/) sat at the shortest warmup tried (30) and the highest rate tried: the GPT-2 track at Muon
# 0.02 (450 steps), the open track at AdamW 0.01 (250 steps). Here each pick beside a shorter warmup (10), the edge
# rate raised again (Muon 0.04; AdamW 0.03), and both rates raised together, on VAL, the first step's 2 seeds, wsd
# budgets 175 to 450.
# The rule, fixed here before any run: T_val = 1.9420790462342166 as before; a (cell, budget) reaches when the mean
# val loss of its 2 seeds is at most T_val - 0.02; a track's pick is its reaching (cell, budget) of fewest steps, ties
# to the lower mean (every cell of a track does the same work a step). A pick at an edge again (warmup 10, Muon 0.04,
# AdamW 0.03, or the smallest budget) sends the next step past it.
# python ablate.py config/ablate_speedrun2_edges.py
base_config = "ablate_speedrun2_warmup.py"  # its recipe, seeds, split, T_val and thread; new cells, budgets, folder
study_dir = "docs/speedrun2_edges"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 warmup_iters=30",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 warmup_iters=10",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.04 batch_size=24 warmup_iters=30",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.02 batch_size=24 warmup_iters=30",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=10",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.03 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.02 batch_size=24 qk_norm=True "
    "warmup_iters=30",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "GPT-2 track, the first step's pick: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 warmup_iters=30",
    "GPT-2 track, warmup 10: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 "
    "batch_size=24 warmup_iters=10",
    "GPT-2 track, Muon 0.04: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.04 "
    "batch_size=24 warmup_iters=30",
    "GPT-2 track, AdamW 0.01 too: learned lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.02 "
    "batch_size=24 warmup_iters=30",
    "open track, the first step's pick: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30",
    "open track, warmup 10: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=10",
    "open track, AdamW 0.03: rope lr_schedule=wsd optimizer=muon learning_rate=0.03 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30",
    "open track, Muon 0.02 too: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.02 "
    "batch_size=24 qk_norm=True warmup_iters=30",
]
budgets = [175, 200, 225, 250, 300, 375, 400, 450]
