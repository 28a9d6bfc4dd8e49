# Stage 2's speed settings in the CPU speedrun's search (docs/speedrun.md), GPT-2 track: torch.compile and bfloat16
# autocast on the batch stage's pick (Muon at 0.01, AdamW at 3e-3, wsd, batch 24, 500 steps: 59.4 s on seed 200000;
# docs/speedrun_search_batch/). On VAL, seeds 200000 and 200001, each cell its own 500 steps (a time-to-target study).
# The rule, fixed here before any run: T_val is stage 1's, 1.9420790462342166; a setting is kept when its cell's
# median training time (the first, compiling step included) is lower than the pick's and both its seeds' val losses
# are still at most T_val - 0.02; if both settings are kept alone, "both" is the pick when it is also the fastest.
# python ablate.py config/ablate_speedrun_search_speed.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the lines below are the study's
study_dir = "docs/speedrun_search_speed"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 max_iters=500",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 max_iters=500 "
    "compile=True",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 max_iters=500 "
    "dtype=bfloat16",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 max_iters=500 "
    "compile=True dtype=bfloat16",
]
seeds = 2
first_seed = 200000  # the records use 1337..1346
eval_split = "val"
target_loss = 1.9420790462342166  # T_val: a time-to-target study, each cell its own steps
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
jobs = 1
threads = 0
