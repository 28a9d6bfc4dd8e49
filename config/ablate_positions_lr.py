# Stage 1b of the character-level position study (docs/positions/README.md): each headline cell's own learning
# rate, chosen on VAL before the headline runs, on seeds the headline never uses. The seven headline cells x
# {3e-4, 1e-3, 3e-3} x 1 seed, one wsd budget of 2000 steps: 42,000 steps of the baby model. A cell's rate scales
# its min_lr with it (the decay keeps its depth). The sinusoidal amplitude is the one stage 1a picked
# (config/ablate_positions_amplitude.py); 0.02 is Vaswani's ratio of position to token signal.
# The rule, fixed here before any run: each cell's rate is the one with the lowest val loss at L = block_size
# (nonoverlapping); it goes into config/ablate_positions_budgets.py.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_positions_lr.py --jobs=2
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "docs/positions_lr"  # its records are committed there (checkpoints are not)
# sinusoidal 0.1: stage 1a's pick (docs/positions_amplitude/results.md: 1.9159 at L = 64, the lowest mean val loss)
variants = ["sinusoidal sinusoidal_amplitude=0.1 learning_rate=0.0003", "sinusoidal sinusoidal_amplitude=0.1 "
            "learning_rate=0.001", "sinusoidal sinusoidal_amplitude=0.1 learning_rate=0.003"]
grid = "pos_encoding=learned,sinusoidal,rope,alibi,t5,none; learning_rate=0.0003,0.001,0.003"  # sinusoidal: 0.02
seeds = 1
first_seed = 3001  # the headline uses 1337.., the amplitude sweep 2001..
eval_split = "val"  # a choice is made here: never on the test split
budgets = [2000]
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
equivalence_margin = 0.0  # a choice by the rule above, not a comparison
reference = ""  # the first cell
sliding_window = 0  # no sliding protocol here
sliding_stride = 0

max_iters = 2000
lr_decay_iters = 2000
