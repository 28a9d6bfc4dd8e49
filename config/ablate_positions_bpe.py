# The position study at BPE level (docs/positions_bpe/README.md, issue 32): Tiny Shakespeare with a 1024-token
# byte-level BPE learned on its train split (about 2.7 characters per token), the character study's encodings at
# its stage-1 choices: learned, sinusoidal at stage 1a's amplitude (0.1), rope, alibi and none, each at the rate
# stage 1b (and 1c) picked for it at character level (3e-3; not retuned for BPE, which the write-up says). 3 seeds,
# wsd budgets 1000 and 2000 (branches of one constant-rate run per (cell, seed)), on the TEST split, both protocols
# at 1x..4x; results.md gives bits per byte beside nats per token, the unit that sets it beside the character study.
# 5 cells x 3 seeds x 2200 steps = 33,000 steps. 2000 steps are 1.5M tokens, 4.2 passes over the 365k train tokens:
# the stable run's val estimates (every 500 steps) say whether val loss has turned up by then.
# python data/shakespeare_char/prepare.py --input=PATH --tokenizer=bpe --vocab_size=1024 \
#     --out_dir=data/shakespeare_bpe1024
# python ablate.py config/ablate_positions_bpe.py --jobs=2
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "docs/positions_bpe"  # its records are committed there (checkpoints are not)
variants = ["learned learning_rate=0.003", "sinusoidal sinusoidal_amplitude=0.1 learning_rate=0.003",
            "rope learning_rate=0.003", "alibi learning_rate=0.003", "none learning_rate=0.003"]
seeds = 3
budgets = [1000, 2000]
headline_budget = 2000
eval_split = "test"
reference = "learned learning_rate=0.003"

dataset = "shakespeare_bpe1024"
max_iters = 2000
lr_decay_iters = 2000
