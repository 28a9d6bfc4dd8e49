# The CPU speedrun, round two, third step, open track (docs/speedrun.md): the pick of the first two steps
# (docs/speedrun2_edges/: rope, QK-norm, warmup 30, AdamW 0.01, Muon 0.01, reaching at 250 steps) beside each of the
# speedruns' new pieces alone: the optimizer's (Polar Express, NorMuon, cautious weight decay, Muon's momentum warmup,
# an EMA of the weights) and the model's (value embeddings, value residual, an x0 shortcut, smear, a bigram table of
# all 65 x 65 character pairs, an untied head that starts at zero). On VAL, the search's 2 seeds (200100, 200101), one
# thread a run, wsd budgets 150 to 250.
# The rule, fixed here before any run: T_val = 1.9420790462342166 as before; a (cell, budget) reaches when the mean
# val loss of its 2 seeds is at most T_val - 0.02. A piece is kept for the next step (the kept pieces together) when
# it reaches at fewer steps than the reference cell, or at the reference's 250 with a mean lower by at least 0.005
# and both seeds lower; a piece that costs time a step (the model's pieces, NorMuon) is kept only if the steps it
# saves pay for it in a quiet-machine timing. A pick at the smallest budget (150) sends the next step below it.
# python ablate.py config/ablate_speedrun2_pieces_open.py
base_config = "ablate_speedrun2_warmup.py"  # its recipe, seeds, split, T_val and thread; new cells, budgets, folder
study_dir = "docs/speedrun2_pieces_open"  # its records are committed there (checkpoints are not)
variants = [
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 muon_orthogonalize=polar_express",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 normuon=True",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 cautious_weight_decay=True",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 muon_momentum_warmup=100",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 ema_decay=0.98 ema_start=100",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 value_embeddings=1",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 value_residual=True",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 x0_shortcut=True",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 smear=True",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 bigram_embedding=4225",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 tie_head=False zero_init_head=True",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "the first step's pick (warmup 30): rope lr_schedule=wsd optimizer=muon learning_rate=0.01 "
    "muon_learning_rate=0.01 batch_size=24 qk_norm=True warmup_iters=30",
    "Polar Express: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30 muon_orthogonalize=polar_express",
    "NorMuon: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 "
    "qk_norm=True warmup_iters=30 normuon=True",
    "cautious weight decay: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30 cautious_weight_decay=True",
    "momentum warmup 0.85 to 0.95 over 100 steps: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 "
    "muon_learning_rate=0.01 batch_size=24 qk_norm=True warmup_iters=30 muon_momentum_warmup=100",
    "EMA 0.98 from step 100: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30 ema_decay=0.98 ema_start=100",
    "value embeddings (1 table): rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01"
    " batch_size=24 qk_norm=True warmup_iters=30 value_embeddings=1",
    "value residual: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30 value_residual=True",
    "x0 shortcut: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 "
    "qk_norm=True warmup_iters=30 x0_shortcut=True",
    "smear: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 "
    "qk_norm=True warmup_iters=30 smear=True",
    "bigram table (65 x 65 pairs): rope lr_schedule=wsd optimizer=muon learning_rate=0.01 "
    "muon_learning_rate=0.01 batch_size=24 qk_norm=True warmup_iters=30 bigram_embedding=4225",
    "untied head from zero: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 "
    "batch_size=24 qk_norm=True warmup_iters=30 tie_head=False zero_init_head=True",
]
budgets = [150, 175, 200, 225, 250]
