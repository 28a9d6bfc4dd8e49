# The CPU speedrun, round two, fourth step, GPT-2 track (docs/speedrun.md): the third step's picks together
# (docs/speedrun2_pieces_gpt2/: warmup 0 by the warmups' rule, 1.9135 at 375; NorMuon alone reaching at 350) and the
# two levers that cost fewer seconds rather than fewer steps: 3 orthogonalisation iterations instead of 5 (bench.py
# --what=muon) and a batch that grows from 8 to 24 sequences over the first 100 steps. On VAL, the search's 2 seeds
# (200100, 200101), one thread a run, wsd budgets 300 to 375 (NorMuon reached at 350: two budgets below it).
# The rule, fixed here before any run: T_val = 1.9420790462342166 as before; a (cell, budget) reaches when the mean
# val loss of its 2 seeds is at most T_val - 0.02. The cells differ in their cost a step (NorMuon's normalisation,
# fewer iterations, smaller early batches), so steps alone do not decide: each cell's smallest reaching budget is its
# candidate, and the candidates are timed as whole train.py runs at their steps on a quiet machine (both threads, as
# the records train), alternately with the reference's (warmup 0 at 375), 3 rounds; the pick is the candidate of the
# least median time, and one within 3% of the reference's is not taken over it (the timing's own spread).
# python ablate.py config/ablate_speedrun2_combined_gpt2.py
base_config = "ablate_speedrun2_warmup.py"  # its recipe, seeds, split, T_val and thread; new cells, budgets, folder
study_dir = "docs/speedrun2_combined_gpt2"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True muon_orthogonalize_steps=3",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True batch_size_warmup=100 batch_size_start=8",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "the third step's pick (warmup 0): learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 warmup_iters=0",
    "NorMuon: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True",
    "NorMuon, 3 iterations: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 "
    "batch_size=24 warmup_iters=0 normuon=True muon_orthogonalize_steps=3",
    "NorMuon, batch 8 to 24 over 100 steps: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 warmup_iters=0 normuon=True batch_size_warmup=100 batch_size_start=8",
]
budgets = [300, 325, 350, 375]
