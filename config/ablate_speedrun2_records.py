# The CPU speedrun's round-two records (docs/speedrun.md): nanoGPT's CPU recipe and each track's round-two pick, each
# at its own steps, trained alternately (seed by seed) on fresh seeds 1347..1351 and scored on TEST at L = block_size,
# as round one's records (config/ablate_speedrun.py) were. One run at a time on both cores (jobs 1, torch's own
# threads), on an idle machine.
#   GPT-2 track: warmup 0, Muon 0.02 with NorMuon for the blocks' matrices, AdamW 3e-3 for the rest, wsd, batch 24,
#     350 steps (docs/speedrun2_warmup/, speedrun2_edges/, speedrun2_pieces_gpt2/, speedrun2_combined_gpt2/).
#   Open track: rope and QK-norm, warmup 30, Muon 0.01, AdamW 0.01, 250 steps (docs/speedrun2_warmup/; no later
#     step changed it: speedrun2_edges/, speedrun2_pieces_open/, speedrun2_combined_open/).
# A recipe is a record when its mean test loss is at most the target T (stage 0, docs/speedrun_target/) by the
# one-sided t test with p < 0.01, in less training time than nanoGPT's recipe; its time is the geometric mean of the
# seeds' ratios to nanoGPT's recipe's, with its 95% interval.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_speedrun2_records.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the cells below change it
study_dir = "docs/speedrun2_records"  # its records are committed there (checkpoints are not)
variants = [
    "learned",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True max_iters=350",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 qk_norm=True "
    "warmup_iters=30 max_iters=250",
]
labels = [  # the names its tables and plots give the cells (no part of the runs' identity)
    "nanoGPT's recipe: learned",
    "GPT-2 track: learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.02 batch_size=24 "
    "warmup_iters=0 normuon=True max_iters=350",
    "open track: rope lr_schedule=wsd optimizer=muon learning_rate=0.01 muon_learning_rate=0.01 batch_size=24 "
    "qk_norm=True warmup_iters=30 max_iters=250",
]
seeds = 5
first_seed = 1347  # the target used 1337..1341, round one's records 1342..1346, the search 200000 on
eval_split = "test"
target_loss = 1.8599327404469619  # T: nanoGPT's recipe's mean test loss on seeds 1337..1341
reference = "learned"
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
jobs = 1
threads = 0
