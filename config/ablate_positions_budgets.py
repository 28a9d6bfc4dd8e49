# Stage 2 of the character-level position study (docs/positions/README.md), the headline, on the TEST split:
# learned (wpe std 0.01), sinusoidal at stage 1a's amplitude (0.1) and at Vaswani's ratio of position to token
# signal (0.02, against GPT-2's token std 0.02), rope, alibi, t5 and none; each cell at its own learning rate, the
# one stages 1b and 1c picked on val (config/ablate_positions_lr.py, _lr_high.py; docs/positions_lr*/results.md).
# 5 seeds (1337..1341, which no choice used). Each budget is a complete warmup-stable-decay schedule: one
# constant-rate run per (cell, seed) in segments to 800, 1600 and 3200 steps, and decay branches of 200, 400 and 800
# steps for the budgets 1000, 2000 and 4000: 7 cells x 5 seeds x 4600 = 161,000 steps (--list_runs=True prices it
# on this machine). Both protocols at 1x, 2x and 4x block_size. The TOST margin, 0.01 nats/token, is fixed in
# ablate_positions_base.py before any run.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_positions_amplitude.py --jobs=2   (stage 1a: the amplitude, on val)
# python ablate.py config/ablate_positions_lr.py --jobs=2          (stage 1b: each cell's learning rate, on val)
# python ablate.py config/ablate_positions_budgets.py --jobs=2 --time_limit=90m   (as many sittings as it takes)
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "docs/positions_budgets"  # its records are committed there (checkpoints are not)
# Each cell's learning rate: stage 1b's pick, by its rule (the lowest val loss at L = block_size), and stage 1c's
# (config/ablate_positions_lr_high.py) for the six that 1b picked at its grid's top (3e-3): 1e-2 beat 3e-3 for t5
# alone (1.8491 against 1.8685; docs/positions_lr_high/results.md), so t5 runs at 1e-2, again the top of what was
# tried. Sinusoidal 0.02 took 1e-3.
variants = ["learned learning_rate=0.003", "sinusoidal sinusoidal_amplitude=0.1 learning_rate=0.003",
            "sinusoidal sinusoidal_amplitude=0.02 learning_rate=0.001", "rope learning_rate=0.003",
            "alibi learning_rate=0.003", "t5 learning_rate=0.01", "none learning_rate=0.003"]
seeds = 5
budgets = [1000, 2000, 4000]
headline_budget = 4000
eval_split = "test"
reference = "learned learning_rate=0.003"

max_iters = 4000
lr_decay_iters = 4000

# Stage 2b: every cell's paired gap to learned moved between 2000 and 4000 steps by more than its interval
# (docs/positions_budgets/results.md, "moves"), so by the rule every cell goes on to 8000 steps (a 6400-step
# constant-rate run continuing the 3200-step one, and a 1600-step decay) on the first 3 seeds, after the whole plan.
extra_budgets = [8000]
extra_variants = ["learned learning_rate=0.003", "sinusoidal sinusoidal_amplitude=0.1 learning_rate=0.003",
                  "sinusoidal sinusoidal_amplitude=0.02 learning_rate=0.001", "rope learning_rate=0.003",
                  "alibi learning_rate=0.003", "t5 learning_rate=0.01", "none learning_rate=0.003"]
extra_seeds = 3
