# The CPU speedrun's records (docs/speedrun.md): nanoGPT's CPU recipe and each track's pick from the search, each at
# its own steps, trained alternately (seed by seed) on seeds 1342..1346 and scored on TEST at L = block_size. One run
# at a time on both cores (jobs 1, torch's own threads), on an idle machine.
#   GPT-2 track: Muon at 0.01 for the blocks' matrices, AdamW at 3e-3 for the rest, wsd, batch 24, 500 steps
#     (docs/speedrun_search_optimizer/, docs/speedrun_search_batch/; compile and bfloat16 not kept,
#     docs/speedrun_search_speed/).
#   Open track: the same with rope and QK-norm, 250 steps (docs/speedrun_search_open/,
#     docs/speedrun_search_open_combined/).
# A recipe is a record when its mean test loss is at most the target T (stage 0, docs/speedrun_target/) by the
# one-sided t test with p < 0.01, in less training time than nanoGPT's recipe; its time is the geometric mean of the
# seeds' ratios to nanoGPT's recipe's, with its 95% interval.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_speedrun.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the cells below change it
study_dir = "docs/speedrun_records"  # its records are committed there (checkpoints are not)
variants = [
    "learned",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 max_iters=500",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 "
    "qk_norm=True max_iters=250",
]
# Names the tables and plots give the cells (each cell written as in variants; its folder and records keep its name)
labels = [
    "nanoGPT's recipe: learned",
    "GPT-2 track: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 "
    "max_iters=500",
    "open track: rope lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 "
    "qk_norm=True max_iters=250",
]
seeds = 5
first_seed = 1342  # the target used 1337..1341, the search 200000 on
eval_split = "test"
target_loss = 1.8599327404469619  # T: nanoGPT's recipe's mean test loss on seeds 1337..1341
reference = "learned"
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
jobs = 1
threads = 0
