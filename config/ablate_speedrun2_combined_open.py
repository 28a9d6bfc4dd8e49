# The CPU speedrun, round two, fourth step, open track (docs/speedrun.md): no new piece was kept by the third step
# (docs/speedrun2_pieces_open/: none reached before 250 steps or lower by 0.005 there), so the first step's pick stays
# and meets the two levers that cost fewer seconds rather than fewer steps: 3 orthogonalisation iterations instead of
# 5 (bench.py --what=muon) and a batch that grows from 8 to 24 sequences over the first 75 steps. On VAL, the
# search's 2 seeds (200100, 200101), one thread a run, wsd budgets 200 to 250.
# The rule, fixed here before any run: T_val = 1.9420790462342166 as before; a (cell, budget) reaches when the mean
# val loss of its 2 seeds is at most T_val - 0.02. Each cell's smallest reaching budget is its candidate; the
# candidates are timed as whole train.py runs at their steps on a quiet machine (both threads, as the records train),
# alternately with the reference's (250 steps), 3 rounds; the pick is the candidate of the least median time, and one
# within 3% of the reference's is not taken over it (the timing's own spread).
# python ablate.py config/ablate_speedrun2_combined_open.py
base_config = "ablate_speedrun2_warmup.py"  # its recipe, seeds, split, T_val and thread; new cells, budgets, folder
study_dir = "docs/speedrun2_combined_open"  # its records are committed there (checkpoints are not)
variants = [
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 muon_orthogonalize_steps=3",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 batch_size_warmup=75 batch_size_start=8",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "the first step's pick (warmup 30): rope lr_schedule=wsd optimizer=muon learning_rate=0.01 "
    "muon_learning_rate=0.01 batch_size=24 qk_norm=True warmup_iters=30",
    "3 iterations: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 "
    "qk_norm=True warmup_iters=30 muon_orthogonalize_steps=3",
    "batch 8 to 24 over 75 steps: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30 batch_size_warmup=75 batch_size_start=8",
]
budgets = [200, 225, 250]
