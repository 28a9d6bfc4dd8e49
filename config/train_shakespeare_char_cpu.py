# A character-level Shakespeare model sized for a laptop CPU: about 0.8M parameters, about a minute and a half. The CPU
# speedrun's GPT-2 recipe (speedrun_cpu_gpt2.py: Muon with NorMuon, warmup-stable-decay, batch 24) for 800 steps:
# about the time nanoGPT's recipe (speedrun_cpu_baseline.py) takes for its 2000 (a step costs 2.5 times as much: the
# speedrun's round-two record runs, 35.6 s for 350 against 80.2 s for 2000), to a lower loss (docs/speedrun.md).
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python train.py config/train_shakespeare_char_cpu.py
base_config = "speedrun_cpu_gpt2.py"
out_dir = "out-shakespeare-char-cpu"
max_iters = 800
