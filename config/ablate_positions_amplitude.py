# Stage 1a of the character-level position study (docs/positions/README.md): the sinusoidal table's amplitude,
# chosen on VAL before the headline runs, on seeds the headline never uses. 5 amplitudes x 2 seeds, one wsd budget
# of 2000 steps (a constant-rate run to 1600 and its decay to 2000): 20,000 steps of the baby model.
# The rule, fixed here before any run: the amplitude with the lowest mean val loss at L = block_size
# (nonoverlapping) goes into config/ablate_positions_budgets.py as "the picked sinusoidal".
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_positions_amplitude.py --jobs=2
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "docs/positions_amplitude"  # its records are committed there (checkpoints are not)
variants = []
grid = "pos_encoding=sinusoidal; sinusoidal_amplitude=0.02,0.05,0.1,0.2,0.3"
seeds = 2
first_seed = 2001  # the headline uses 1337.., the learning-rate sweep 3001..
eval_split = "val"  # a choice is made here: never on the test split
budgets = [2000]
eval_multipliers = [1.0, 4.0]
protocols = ["nonoverlapping"]
equivalence_margin = 0.0  # a choice by the rule above, not a comparison
reference = ""  # the first cell
sliding_window = 0  # no sliding protocol here
sliding_stride = 0

max_iters = 2000
lr_decay_iters = 2000
