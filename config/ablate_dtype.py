# Does bfloat16 autocast train the CPU baby model as well as float32? It is the faster setting on a CPU with native
# bfloat16 (AVX512-BF16 or AMX; bench.py's "+ bfloat16 autocast" row); this pairs the two by seed at the baby
# config's own budget (config/train_shakespeare_char_cpu.py), compiled as bench.py times it.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_dtype.py
base_config = "baby_cpu.py"  # the baby model; the lines below change it
study_dir = "out-ablate-dtype"
variants = ["dtype=float32", "dtype=bfloat16"]
seeds = 4
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
eval_batch_size = 64
threads = 1  # one run at a time on one core: the machine's other core stays free

compile = True  # as bench.py times it
