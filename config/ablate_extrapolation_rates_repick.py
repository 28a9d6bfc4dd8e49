# Round three of the extrapolation study (docs/positions_extrapolation/, issue 54): the eleven cells stage 1 picked on
# one val seed at 2000 steps (config/ablate_extrapolation_lr.py), picked again as the five new encodings were
# (config/ablate_extrapolation_rates_new.py): on 2 seeds stage 2 never uses (3001, 3002), at stage 2's headline budget
# (wsd, 4000 steps; the 2000-step decay comes free from the same constant-rate run and is reported, not used).
# The rules, fixed here before any run:
# - each cell's rate is the one with the lowest mean val loss of its 2 seeds at L = block_size (nonoverlapping),
#   at 4000 steps;
# - a pick at an edge of {1e-3, 3e-3, 1e-2} adds the next rate past that edge (3e-4 or 3e-2) on the same 2 seeds
#   before the pick is final, and again while the pick stays at the new edge;
# - a cell whose pick differs from its stage-1 rate trains stage 2 again at the new rate
#   (config/ablate_extrapolation.py: its 5 test seeds and 3 budgets), and docs/positions_extrapolation says each
#   verdict that changed; a cell whose pick is its stage-1 rate keeps its stage-2 records;
# - each cell's other settings are stage 1's (the papers' defaults, with no search).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_extrapolation_rates_repick.py --jobs=2
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "docs/positions_extrapolation_rates_repick"  # its records are committed there (checkpoints are not)
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
    # the edge rule, after the 264 runs above: p_rope, kerple power, fire and cope were lowest at 1e-3, the low edge;
    # xpos and the random positions of learned and sinusoidal at 1e-2, the high edge
    "p_rope learning_rate=0.0003",
    "kerple kerple_kernel=power learning_rate=0.0003",
    "fire learning_rate=0.0003",
    "cope learning_rate=0.0003",
    "xpos learning_rate=0.03",
    "learned random_positions=512 learning_rate=0.03",
    "sinusoidal sinusoidal_amplitude=0.1 random_positions=512 learning_rate=0.03",
]
seeds = 2
first_seed = 3001  # stage 2 uses 1337..1341
eval_split = "val"  # a choice is made here: never on the test split
budgets = [2000, 4000]
headline_budget = 4000
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
equivalence_margin = 0.0
reference = ""
sliding_window = 0
sliding_stride = 0

max_iters = 4000
lr_decay_iters = 4000
