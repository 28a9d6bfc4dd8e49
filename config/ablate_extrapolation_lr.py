# Stage 1 of the extrapolation study (docs/positions_extrapolation/): each new cell's learning rate, chosen on VAL
# before stage 2 (config/ablate_extrapolation.py), on a seed stage 2 never uses (3001, as the position study's
# stage 1b). The new cells x {1e-3, 3e-3, 1e-2} x 1 seed, one wsd budget of 2000 steps; a cell's rate scales its
# min_lr with it. The seven cells of the position study keep their stage-1 picks (config/ablate_positions_budgets.py).
# The rules, fixed here before any run:
# - each cell's rate is the one with the lowest val loss at L = block_size (nonoverlapping);
# - settings a paper leaves open take the default of the paper or its reference code, with no search (the budget
#   pays for rates, not for settings): partial rotary turns 0.25 of each head (GPT-NeoX's rotary_pct), p-RoPE keeps
#   0.75 of the frequencies, xPos gamma 0.4 and scale base 512, FIRE's MLP 32 wide, CoPE's table block_size rows;
# - randomized positions draw from 0..511, the longest length stage 2 scores (8 x block_size), as Ruoss et al. set
#   the range to the longest test length; sinusoidal at stage 1a's amplitude, 0.1;
# - t5 at t5_max_distance=64 (= block_size): every bucket is trained (the position study's 128 left 27..31 untrained).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_extrapolation_lr.py --jobs=2
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "docs/positions_extrapolation_lr"  # its records are committed there (checkpoints are not)
variants = [
    "partial_rope learning_rate=0.001",
    "partial_rope learning_rate=0.003",
    "partial_rope learning_rate=0.01",
    "p_rope learning_rate=0.001",
    "p_rope learning_rate=0.003",
    "p_rope learning_rate=0.01",
    "xpos learning_rate=0.001",
    "xpos learning_rate=0.003",
    "xpos learning_rate=0.01",
    "kerple kerple_kernel=log learning_rate=0.001",
    "kerple kerple_kernel=log learning_rate=0.003",
    "kerple kerple_kernel=log learning_rate=0.01",
    "kerple kerple_kernel=power learning_rate=0.001",
    "kerple kerple_kernel=power learning_rate=0.003",
    "kerple kerple_kernel=power learning_rate=0.01",
    "fire learning_rate=0.001",
    "fire learning_rate=0.003",
    "fire learning_rate=0.01",
    "cope learning_rate=0.001",
    "cope learning_rate=0.003",
    "cope learning_rate=0.01",
    "learned random_positions=512 learning_rate=0.001",
    "learned random_positions=512 learning_rate=0.003",
    "learned random_positions=512 learning_rate=0.01",
    "sinusoidal sinusoidal_amplitude=0.1 random_positions=512 learning_rate=0.001",
    "sinusoidal sinusoidal_amplitude=0.1 random_positions=512 learning_rate=0.003",
    "sinusoidal sinusoidal_amplitude=0.1 random_positions=512 learning_rate=0.01",
    "rope random_positions=512 learning_rate=0.001",
    "rope random_positions=512 learning_rate=0.003",
    "rope random_positions=512 learning_rate=0.01",
    "t5 t5_max_distance=64 learning_rate=0.001",
    "t5 t5_max_distance=64 learning_rate=0.003",
    "t5 t5_max_distance=64 learning_rate=0.01",
]
seeds = 1
first_seed = 3001  # stage 2 uses 1337..1341
eval_split = "val"  # a choice is made here: never on the test split
budgets = [2000]
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
equivalence_margin = 0.0
reference = ""
sliding_window = 0
sliding_stride = 0

max_iters = 2000
lr_decay_iters = 2000
