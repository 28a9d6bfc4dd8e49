# The CPU speedrun's search, open track (docs/speedrun.md): each of the repository's options added alone to the GPT-2
# track's pick (Muon at 0.01, AdamW at 3e-3, wsd, batch 24: it reached at 500 steps in 59.4 s; compile and bfloat16
# were not kept, docs/speedrun_search_speed/). On VAL, seed 200000, wsd budgets 250, 375 and 500 steps (375: stage 2's
# budgets jumped from 250 to 500, so the pick itself is tried between them too).
# The rule, fixed here before any run: T_val is stage 1's, 1.9420790462342166; a (cell, budget) reaches when its val
# loss is at most T_val - 0.02. An option whose val loss at 500 steps is lower than the pick's by 0.01 or more joins
# the combined cell, which config/ablate_speedrun_search_open_combined.py then trains beside the pick at the same
# budgets. The open track's pick is the reaching (cell, budget) of least training time over both studies; the GPT-2
# track's pick becomes the pick cell's least reaching budget here, if it is under 500.
# python ablate.py config/ablate_speedrun_search_open.py
base_config = "baby_cpu.py"  # nanoGPT's CPU recipe, as speedrun_cpu_baseline.py; the lines below are the study's
study_dir = "docs/speedrun_search_open"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24",
    "alibi lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 "
    "mlp_activation=relu2",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 qk_norm=True",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 "
    "zero_init_proj=True",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 logit_softcap=15",
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 tie_head=False",
]
seeds = 1
first_seed = 200000  # the records use 1337..1346
eval_split = "val"
budgets = [250, 375, 500]
target_loss = 1.9420790462342166  # T_val
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
jobs = 1
threads = 0
