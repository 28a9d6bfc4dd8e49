# Does a warmup-stable-decay branch land where a dedicated cosine run of the same budget lands? The position
# studies (config/ablate_positions_budgets.py) train each budget as a wsd branch of one constant-rate run per
# seed; this pairs, seed by seed, the learned cell trained to one budget both ways, on the test split, with an
# equivalence test at 0.01 nats/token (fixed here, before the runs).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_lr_schedule.py
base_config = "baby_cpu.py"  # the baby model; the lines below change it
study_dir = "out-ablate-lr-schedule"
variants = ["lr_schedule=cosine", "lr_schedule=wsd"]
budgets = [1000]  # cosine: lr_decay_iters = 1000; wsd: constant to step 800, then the branch decays to 1000
seeds = 5
eval_split = "test"
equivalence_margin = 0.01
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
eval_batch_size = 64
threads = 1  # one thread per process: on a small shared CPU two OpenMP threads ran slower than one (measured)

eval_interval = 200

pos_encoding = "learned"
max_iters = 1000
lr_decay_iters = 1000
wsd_decay_fraction = 0.2
wsd_decay_shape = "1-sqrt"
