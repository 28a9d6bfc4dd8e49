# The CPU speedrun's search, open track, second step (docs/speedrun.md): the options that
# config/ablate_speedrun_search_open.py found lower than the GPT-2 pick by 0.01 or more at 500 steps (val, seed
# 200000), combined in one cell, beside the pick at the same budgets. Those were rope (-0.069), ALiBi (-0.032) and
# QK-norm (-0.029). rope and ALiBi are two values of one setting (pos_encoding) and cannot both be on: the lower of
# them at 500 steps, rope, is the one taken (a reading of the rule, written here before these runs; the rule had
# not foreseen two encodings).
# The rule, as in the first step: T_val = 1.9420790462342166; a (cell, budget) reaches when its val loss is at most
# T_val - 0.02; the open track's pick is the reaching (cell, budget) of least training time over both studies.
# python ablate.py config/ablate_speedrun_search_open_combined.py
base_config = "ablate_speedrun_search_open.py"  # its recipe, seeds, split, budgets and T_val; new cells and folder
study_dir = "docs/speedrun_search_open_combined"  # its records are committed there (checkpoints are not)
variants = [
    "learned lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24",
    "rope lr_schedule=wsd optimizer=muon learning_rate=0.003 muon_learning_rate=0.01 batch_size=24 qk_norm=True",
]
