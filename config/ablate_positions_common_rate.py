# Stage 2c of the character-level position study (docs/positions/README.md), on the TEST split: the four cells whose
# verdicts against learned could rest on the learning rate (learned, sinusoidal 0.1, rope, alibi) at one common rate,
# 1e-3 (nanoGPT's), beside stage 2's per-cell rates (config/ablate_positions_budgets.py, mostly 3e-3). Stage 1b
# (docs/positions_lr/results.md) says learned gains more from 3e-3 than alibi and sinusoidal 0.1 do, so a gap measured
# at the per-cell rates could be the rate's, not the encoding's. Same seeds (1337..1341), budgets (1000, 2000, 4000,
# wsd branches from one constant-rate run) and evaluation as stage 2: 4 cells x 5 seeds x 4600 = 92,000 steps.
# python ablate.py config/ablate_positions_common_rate.py --jobs=2 --time_limit=90m
base_config = "ablate_positions_budgets.py"  # stage 2: its seeds, budgets, split and evaluation; these lines change it
study_dir = "docs/positions_common_rate"  # its records are committed there (checkpoints are not)
variants = ["learned learning_rate=0.001", "sinusoidal sinusoidal_amplitude=0.1 learning_rate=0.001",
            "rope learning_rate=0.001", "alibi learning_rate=0.001"]
reference = "learned learning_rate=0.001"
extra_budgets = []  # stage 2b's 8000-step budget is not part of this stage
extra_variants = []  # (and no cells for it)
