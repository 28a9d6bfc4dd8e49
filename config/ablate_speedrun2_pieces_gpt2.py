# The CPU speedrun, round two, third step, GPT-2 track (docs/speedrun.md): the second step's pick
# (docs/speedrun2_edges/: warmup 10, Muon 0.02, AdamW 0.003, reaching at 375 steps) beside shorter warmups (5, 0:
# warmup 10 was an edge) and beside each of the optimizer's new pieces alone (the track keeps GPT-2's architecture):
# Polar Express, NorMuon, cautious weight decay, Muon's momentum warmup, an EMA of the weights. On VAL, the search's
# 2 seeds (200100, 200101), one thread a run, wsd budgets 250 to 375.
# The rule, fixed here before any run: T_val = 1.9420790462342166 as before; a (cell, budget) reaches when the mean
# val loss of its 2 seeds is at most T_val - 0.02. The warmups: the earlier steps' rule (fewest steps, ties to the
# lower mean). A piece is kept for the next step (the kept pieces together) when it reaches at fewer steps than the
# reference cell, or at the reference's 375 with a mean lower by at least 0.005 and both seeds lower; a piece that
# costs time a step is kept only if the steps it saves pay for it in a quiet-machine timing. A pick at the smallest
# budget (250) sends the next step below it.
# python ablate.py config/ablate_speedrun2_pieces_gpt2.py
base_config = "ablate_speedrun2_warmup.py"  # its recipe, seeds, split, T_val and thread; new cells, budgets, folder
study_dir = "docs/speedrun2_pieces_gpt2"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=10",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=5",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=10 muon_orthogonalize=polar_express",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=10 normuon=True",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=10 cautious_weight_decay=True",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=10 muon_momentum_warmup=100",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=10 ema_decay=0.98 ema_start=150",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "the second step's pick (warmup 10): learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 warmup_iters=10",
    "warmup 5: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24"
    " warmup_iters=5",
    "warmup 0: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24"
    " warmup_iters=0",
    "Polar Express: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 "
    "batch_size=24 warmup_iters=10 muon_orthogonalize=polar_express",
    "NorMuon: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=10 normuon=True",
    "cautious weight decay: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 "
    "batch_size=24 warmup_iters=10 cautious_weight_decay=True",
    "momentum warmup 0.85 to 0.95 over 100 steps: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 "
    "muon_learning_rate=0.02 batch_size=24 warmup_iters=10 muon_momentum_warmup=100",
    "EMA 0.98 from step 150: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02"
    " batch_size=24 warmup_iters=10 ema_decay=0.98 ema_start=150",
]
budgets = [250, 300, 325, 350, 375]
