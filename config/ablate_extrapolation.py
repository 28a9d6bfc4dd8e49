# The extrapolation study (docs/positions_extrapolation/): the position encodings of the length-
# generalisation papers beside the seven cells of the position study, on Tiny Shakespeare characters, the baby
# model at block 64, scored on the TEST split at 1x, 2x, 4x and 8x block_size under both protocols. The position
# study's stage 2 (config/ablate_positions_budgets.py) as it is, one length further: the same seeds (1337..1341),
# wsd budgets 1000, 2000 and 4000 (one constant-rate run per cell and seed, decay branches per budget), each cell at
# the rate its stage 1 picked on val. The six existing cells keep the position study's picks (t5 is new here, at
# t5_max_distance=64, so that every bucket it is scored with was trained); their 8x scores need
# their checkpoints, which were never committed, so they train again here (same settings and seeds: the same bits on
# the machine that trained them: compare their checkpoint digests with docs/positions_budgets' records).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_extrapolation.py --jobs=2 --time_limit=150m   (as many sittings as it takes)
base_config = "ablate_positions_base.py"  # the baby model, the schedule, the evaluation, the TOST margin (0.01)
study_dir = "docs/positions_extrapolation"  # its records are committed there (checkpoints are not)
# The new cells at the rates picked on val by the rule of config/ablate_extrapolation_rates_repick.py (round three:
# the lowest mean val loss of 2 seeds at L = block_size at 4000 steps, edges extended; its README). Six picks differ
# from round two's (1 seed at 2000 steps, docs/positions_extrapolation_lr/): partial_rope 1e-3 -> 3e-3, p_rope
# 3e-3 -> 1e-3, xpos 3e-3 -> 1e-2, fire 3e-3 -> 1e-3, sinusoidal random_positions 3e-3 -> 1e-2, t5 1e-2 -> 3e-3;
# their round-two records stay in study_dir beside the new ones. The last five are round three's new encodings at
# the rates their own stage 1 picked the same way (docs/positions_extrapolation_rates_new/).
variants = ["learned learning_rate=0.003", "sinusoidal sinusoidal_amplitude=0.1 learning_rate=0.003",
            "sinusoidal sinusoidal_amplitude=0.02 learning_rate=0.001", "rope learning_rate=0.003",
            "alibi learning_rate=0.003", "none learning_rate=0.003",
            "t5 t5_max_distance=64 learning_rate=0.003", "partial_rope learning_rate=0.003",
            "p_rope learning_rate=0.001",
            "xpos learning_rate=0.01", "kerple kerple_kernel=log learning_rate=0.003",
            "kerple kerple_kernel=power learning_rate=0.001", "fire learning_rate=0.001", "cope learning_rate=0.001",
            "learned random_positions=512 learning_rate=0.01",
            "sinusoidal sinusoidal_amplitude=0.1 random_positions=512 learning_rate=0.01",
            "rope random_positions=512 learning_rate=0.003",
            "head_rope learning_rate=0.003", "layer_rope learning_rate=0.003", "pope learning_rate=0.001",
            "fox learning_rate=0.001", "dynamic_bias learning_rate=0.001"]
# The paired tests: each cell against learned and against alibi (the position study's best reader of long texts)
compare_to = ["learned learning_rate=0.003", "alibi learning_rate=0.003"]
seeds = 5
budgets = [1000, 2000, 4000]
headline_budget = 4000
eval_split = "test"
eval_multipliers = [1.0, 2.0, 4.0, 8.0]
reference = "learned learning_rate=0.003"

max_iters = 4000
lr_decay_iters = 4000
