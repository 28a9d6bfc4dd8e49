# The quick start: a small character model of Python's own documentation, on a CPU in about two minutes.
# python data/python_docs_char/prepare.py && python train.py config/train_python_docs_char.py
base_config = "train_shakespeare_char_cpu.py"  # the same model and recipe; only the data differ
out_dir = "out-python-docs-char"
dataset = "python_docs_char"
