# Which tokenizer for a small corpus? config/ablate_tokenizers.py on the offline Python-docs corpus: characters,
# a byte-level BPE learned on its train split at 512, 2048 and 8192 tokens, and GPT-2's BPE; the same model and
# the same compute in tokens (400 steps x 12 x 64 = 307k tokens seen), compared in bits per byte on the test split.
# 2 seeds at 400 steps: what this session's CPU time allowed beside the Shakespeare study.
# python data/python_docs_char/prepare.py
# for v in 512 2048 8192; do python data/python_docs_char/prepare.py --tokenizer=bpe \
#     --vocab_size=$v --out_dir=data/python_docs_bpe$v; done
# python data/python_docs_char/prepare.py --tokenizer=gpt2 --out_dir=data/python_docs_gpt2
# python ablate.py config/ablate_tokenizers_python_docs.py
base_config = "ablate_tokenizers.py"  # the Shakespeare study; the lines below change it
study_dir = "docs/tokenizers_python_docs"  # its records are committed there (checkpoints are not)
variants = ["dataset=python_docs_char", "dataset=python_docs_bpe512", "dataset=python_docs_bpe2048",
            "dataset=python_docs_bpe8192", "dataset=python_docs_gpt2"]
reference = "dataset=python_docs_char"
seeds = 2
max_iters = 400
lr_decay_iters = 400
