# A character-level Shakespeare model sized for a laptop CPU: about 0.8M parameters, a few minutes.
# python data/shakespeare_char/prepare.py --input=PATH   (or with network, no --input)
# python train.py config/train_shakespeare_char_cpu.py
base_config = "baby_cpu.py"
out_dir = "out-shakespeare-char-cpu"
