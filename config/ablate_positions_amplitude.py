# The tuning that the position study's sinusoidal and learned cells get, on VAL, at the headline budget of
# config/ablate_positions_budgets.py, on seeds that study does not use: the sinusoidal table's amplitude, and the
# learned table's init std (0.01, GPT-2's; 0.02, nanoGPT's), so that both encodings get a sweep. The rule, fixed
# before the runs: each encoding's lowest mean val loss at L = block_size goes into the position study.
# python data/shakespeare_char/prepare.py --input=PATH   (or with network, no --input)
# python ablate.py config/ablate_positions_amplitude.py
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "out-ablate-positions-amplitude"
variants = ["learned learned_init_std=0.01", "learned learned_init_std=0.02"]
grid = "pos_encoding=sinusoidal; sinusoidal_amplitude=0.005,0.02,0.05,0.1,0.3"
seeds = 3
first_seed = 2001  # the position study uses 1337..
eval_split = "val"  # a choice is made here: never on the test split
budgets = [4000]  # the position study's headline budget
eval_multipliers = [1.0, 4.0]
protocols = ["nonoverlapping"]
equivalence_margin = 0.0  # a choice by the rule above, not a comparison
reference = ""  # the first cell
sliding_window = 0  # no sliding protocol here
sliding_stride = 0

max_iters = 4000
lr_decay_iters = 4000
