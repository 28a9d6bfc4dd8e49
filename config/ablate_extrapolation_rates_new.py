# Round three of the extrapolation study (docs/positions_extrapolation/), stage 1 for the five encodings added in
# round three: each one's learning rate, chosen on VAL before it joins stage 2 (config/ablate_extrapolation.py), on
# 2 seeds stage 2 never uses (3001, 3002) at stage 2's headline budget (wsd, 4000 steps; the 2000-step decay comes
# free from the same constant-rate run and is reported, not used).
# The rules, fixed here before any run:
# - each cell's rate is the one with the lowest mean val loss of its 2 seeds at L = block_size (nonoverlapping),
#   at 4000 steps;
# - a pick at an edge of {1e-3, 3e-3, 1e-2} adds the next rate past that edge (3e-4 or 3e-2) on the same 2 seeds
#   before the pick is final, and again while the pick stays at the new edge;
# - settings a paper leaves open take the default of the paper or its reference code, with no search: head_rope
#   turns half the heads (x-transformers' rotate_num_heads example), layer_rope leaves every 4th layer unturned
#   (Llama 4's no_rope_layers), FoX's forget-gate bias starts at 0 (the paper's code), dynamic_bias at model.py's
#   defaults (x-transformers' DynamicPositionBias: depth 2, no norm; the MLP reads log(d + 1)).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_extrapolation_rates_new.py --jobs=2
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "docs/positions_extrapolation_rates_new"  # its records are committed there (checkpoints are not)
variants = [
    "head_rope learning_rate=0.001",
    "head_rope learning_rate=0.003",
    "head_rope learning_rate=0.01",
    "layer_rope learning_rate=0.001",
    "layer_rope learning_rate=0.003",
    "layer_rope learning_rate=0.01",
    "pope learning_rate=0.001",
    "pope learning_rate=0.003",
    "pope learning_rate=0.01",
    "fox learning_rate=0.001",
    "fox learning_rate=0.003",
    "fox learning_rate=0.01",
    "dynamic_bias learning_rate=0.001",
    "dynamic_bias learning_rate=0.003",
    "dynamic_bias learning_rate=0.01",
    # the edge rule, after the 120 runs above: pope, fox and dynamic_bias were lowest at 1e-3, the low edge
    "pope learning_rate=0.0003",
    "fox learning_rate=0.0003",
    "dynamic_bias learning_rate=0.0003",
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
