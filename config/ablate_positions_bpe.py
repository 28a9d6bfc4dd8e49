# The position study at BPE level: Tiny Shakespeare with a 1024-token byte-level BPE learned on its train split,
# learned vs sinusoidal vs rope vs alibi, 3 seeds, two budgets (wsd branches), on the test split; results.md gives
# bits per byte beside nats per token, the unit that sets it beside the character study.
# python data/shakespeare_char/prepare.py --input=PATH --tokenizer=bpe --vocab_size=1024 \
#     --out_dir=data/shakespeare_bpe1024
# python ablate.py config/ablate_positions_bpe.py
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "out-ablate-positions-bpe"
variants = ["learned", "sinusoidal sinusoidal_amplitude=0.1", "rope", "alibi"]
seeds = 3
budgets = [1000, 2000]
eval_split = "test"

dataset = "shakespeare_bpe1024"

