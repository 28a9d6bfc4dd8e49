# The tuning that the position study's sinusoidal and learned cells get, on VAL, at the headline budget of
# config/ablate_positions_budgets.py, on seeds that study does not use: the sinusoidal table's amplitude, and the
# learned table's init std (0.01, GPT-2's; 0.02, nanoGPT's), so that both encodings get a sweep. The rule, fixed
# before the runs: each encoding's lowest mean val loss at L = block_size goes into the position study.
# python data/shakespeare_char/prepare.py --input=PATH   (or with network, no --input)
# python ablate.py config/ablate_positions_amplitude.py
base_config = "baby_cpu.py"  # the baby model; the lines below change it
study_dir = "out-ablate-positions-amplitude"
variants = ["learned learned_init_std=0.01", "learned learned_init_std=0.02"]
grid = "pos_encoding=sinusoidal; sinusoidal_amplitude=0.005,0.02,0.05,0.1,0.3"
seeds = 3
first_seed = 2001  # the position study uses 1337..
eval_split = "val"  # a choice is made here: never on the test split
budgets = [4000]  # the position study's headline budget
eval_multipliers = [1.0, 4.0]
protocols = ["nonoverlapping"]
eval_batch_size = 64
threads = 1

eval_interval = 500
max_iters = 4000
lr_decay_iters = 4000
lr_schedule = "wsd"
wsd_decay_fraction = 0.2
wsd_decay_shape = "1-sqrt"
