# The sinusoidal table's amplitude, swept before the position study (config/ablate_positions.py) on other seeds,
# so that picking the best amplitude here does not bias the comparison there. 5 amplitudes x 2 seeds at half the
# study's steps: all that the 2-core CPU's time allowed next to the study itself (about 25 minutes).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_positions_sweep.py
base_config = "baby_cpu.py"  # the baby model; the lines below change it
study_dir = "out-ablate-positions-sweep"
variants = []
grid = "pos_encoding=sinusoidal; sinusoidal_amplitude=0.005,0.02,0.1,0.3,1.0"
seeds = 2
first_seed = 2001  # the position study uses 1337..1341
eval_multipliers = [1.0, 4.0]
protocols = ["nonoverlapping"]
eval_batch_size = 64
# One thread: on a 2-core CPU shared with other jobs, two OpenMP threads ran 1.5-4x slower than one (measured).
threads = 1

eval_interval = 100
max_iters = 500  # half the position study's budget
lr_decay_iters = max_iters
