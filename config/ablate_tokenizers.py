# Which tokenizer for a small corpus? Tiny Shakespeare as characters, as a byte-level BPE learned on its train
# split at 512, 2048 and 8192 tokens, and as GPT-2's BPE: the same model (the baby, context 64 tokens) and the
# same compute in tokens (600 steps x 12 x 64 = 461k tokens seen), compared in bits per byte on the test split.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char
# for v in 512 2048 8192; do python data/shakespeare_char/prepare.py --input=PATH --tokenizer=bpe \
#     --vocab_size=$v --out_dir=data/shakespeare_bpe$v; done
# python data/shakespeare_char/prepare.py --input=PATH --tokenizer=gpt2 --out_dir=data/shakespeare_gpt2
# python ablate.py config/ablate_tokenizers.py
base_config = "baby_cpu.py"  # the baby model; the lines below change it
study_dir = "docs/tokenizers_shakespeare"  # its records are committed there (checkpoints are not)
variants = ["dataset=shakespeare_char", "dataset=shakespeare_bpe512", "dataset=shakespeare_bpe2048",
            "dataset=shakespeare_bpe8192", "dataset=shakespeare_gpt2"]
seeds = 3
eval_split = "test"
eval_multipliers = [1.0]
protocols = ["nonoverlapping"]
eval_batch_size = 64
reference = "dataset=shakespeare_char"
threads = 1

max_iters = 600
lr_decay_iters = 600
eval_interval = 200
