# Stage 1c of the character-level position study (docs/positions/README.md): stage 1b picked the grid's largest rate
# (3e-3) for six of its seven cells, so their best rate may lie above any it tried. This stage tries the next rate
# of the same half-decade grid, 1e-2, for those six, on VAL, with stage 1b's seed and budget (one wsd budget of
# 2000 steps, seed 3001): 12,000 steps of the baby model. Sinusoidal 0.02 took 1e-3, inside the grid, and is not rerun.
# The rule, fixed here before any run: a cell takes 1e-2 if its val loss at L = block_size (nonoverlapping) is lower
# than its 3e-3 run's in docs/positions_lr/results.md; otherwise it keeps 3e-3. The pick goes into
# config/ablate_positions_budgets.py. A cell that takes 1e-2 is at the new grid's top again: that is said, not chased.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_positions_lr_high.py --jobs=2
base_config = "ablate_positions_lr.py"  # stage 1b's seed, budget, split and evaluation; the lines below change them
study_dir = "docs/positions_lr_high"  # its records are committed there (checkpoints are not)
variants = ["sinusoidal sinusoidal_amplitude=0.1 learning_rate=0.01"]
grid = "pos_encoding=learned,rope,alibi,t5,none; learning_rate=0.01"
