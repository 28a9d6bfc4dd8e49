# What the position studies share (ablate_positions_budgets.py, _amplitude.py, _bpe.py build on it): the baby model,
# a warmup-stable-decay schedule (constant rate, then a 1-sqrt decay over the last fifth of each budget: branches
# per budget from one constant-rate run), and the evaluation: both protocols at 1x..4x, the sliding window at
# block_size with stride 32, a TOST margin of 0.01 nats/token fixed before any run, learned as the reference.
base_config = "baby_cpu.py"  # the baby model; the lines below change it
equivalence_margin = 0.01
eval_multipliers = [1.0, 2.0, 4.0]
protocols = ["nonoverlapping", "sliding"]
sliding_window = 64
sliding_stride = 32
eval_batch_size = 64
reference = "learned"
threads = 1

eval_interval = 500
lr_schedule = "wsd"
wsd_decay_fraction = 0.2
wsd_decay_shape = "1-sqrt"
