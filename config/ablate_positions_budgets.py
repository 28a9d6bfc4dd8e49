# The position study at four budgets on character-level Shakespeare, reported on the TEST split: learned,
# sinusoidal at the amplitude config/ablate_positions_amplitude.py picks on val (put its pick below; 0.1 was the
# previous sweep's) and at Vaswani's ratio of position to token signal (0.02 against GPT-2's token std 0.02),
# rope, alibi, none. Each budget is a complete warmup-stable-decay schedule: one constant-rate run per (cell, seed)
# and a decay branch per budget (stable to 800, 1600, 3200; branches of 200, 400, 800 steps). Each cell also
# trains at its own learning rate, picked on val by a sweep on seeds the headline does not use. TOST margin
# 0.01 nats/token, fixed here before the runs.
# python data/shakespeare_char/prepare.py --input=PATH   (or with network, no --input)
# python ablate.py config/ablate_positions_amplitude.py   (first: the amplitude, on val)
# python ablate.py config/ablate_positions_budgets.py
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "out-ablate-positions-budgets"
variants = ["learned", "sinusoidal sinusoidal_amplitude=0.1", "sinusoidal sinusoidal_amplitude=0.02", "rope",
            "alibi", "none"]
seeds = 6
budgets = [1000, 2000, 4000]
headline_budget = 4000
eval_split = "test"
lr_sweep = [3e-4, 1e-3, 3e-3]  # the common rate is learning_rate below
lr_sweep_seeds = 2
lr_sweep_first_seed = 3001
lr_sweep_budget = 2000

max_iters = 4000
lr_decay_iters = 4000
