# The CPU speedrun, round two, fifth step, GPT-2 track (docs/speedrun.md): a cheaper Muon step at the record's recipe
# (docs/speedrun2_combined_gpt2/: warmup 0, NorMuon, 350 steps). Fewer orthogonalisation iterations cost Muon's step
# 0.85x at 4 and 0.70x at 3 (bench.py --what=muon), and 3 plain iterations missed the line (the fourth step); AOL's
# scaling (--muon_orthogonalize_scaling=aol, Turbo-Muon, arXiv:2512.04632) starts the iteration nearer its end, so
# that one fewer may do: 4 plain, 4 and 3 with AOL, and Polar Express's last 4 triples with AOL. On VAL, the search's
# 2 seeds (200100, 200101), one thread a run, wsd budgets 325 to 375.
# The rule, fixed here before any run: T_val = 1.9420790462342166 as before; a (cell, budget) reaches when the mean
# val loss of its 2 seeds is at most T_val - 0.02. Each cell's smallest reaching budget is its candidate; a
# candidate at the reference's 350 steps or fewer is timed as whole train.py runs at its steps on a quiet machine
# (both threads, as the records train), alternately with the reference's (the record's recipe at 350), 3 rounds; the
# pick is the candidate of the least median time, and one within 3% of the reference's is not taken over it (the
# timing's own spread). No candidate: the record's recipe stays.
# python ablate.py config/ablate_speedrun2_cheaper_muon.py
base_config = "ablate_speedrun2_warmup.py"  # its recipe, seeds, split, T_val and thread; new cells, budgets, folder
study_dir = "docs/speedrun2_cheaper_muon"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True muon_orthogonalize_steps=4",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True muon_orthogonalize_steps=4 muon_orthogonalize_scaling=aol",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True muon_orthogonalize_steps=3 muon_orthogonalize_scaling=aol",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True muon_orthogonalize=polar_express muon_orthogonalize_steps=4 "
    "muon_orthogonalize_scaling=aol",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "the record's recipe (5 iterations): learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 warmup_iters=0 normuon=True",
    "4 iterations: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True muon_orthogonalize_steps=4",
    "4 iterations, AOL: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 "
    "batch_size=24 warmup_iters=0 normuon=True muon_orthogonalize_steps=4 muon_orthogonalize_scaling=aol",
    "3 iterations, AOL: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 "
    "batch_size=24 warmup_iters=0 normuon=True muon_orthogonalize_steps=3 muon_orthogonalize_scaling=aol",
    "Polar Express, last 4 triples, AOL: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 warmup_iters=0 normuon=True muon_orthogonalize=polar_express "
    "muon_orthogonalize_steps=4 muon_orthogonalize_scaling=aol",
]
budgets = [325, 350, 375]
