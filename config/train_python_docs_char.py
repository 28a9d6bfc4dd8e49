# The quick start: a small character model of Python's own documentation, on a CPU in a few minutes.
# python data/python_docs_char/prepare.py && python train.py config/train_python_docs_char.py
base_config = "baby_cpu.py"  # the baby model; only the data differ
out_dir = "out-python-docs-char"
dataset = "python_docs_char"
