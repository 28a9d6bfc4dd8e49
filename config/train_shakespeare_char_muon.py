# nanoGPT's GPU baby model (train_shakespeare_char.py) with what of the CPU speedrun transfers (docs/speedrun.md):
# Muon at 0.01 for the blocks' matrices with NorMuon's normalisation (round two's optimizer piece), AdamW at 3e-3 for
# the rest, warmup-stable-decay; the CPU track's warmup 0 and Muon 0.02 were picked for 350 steps of a 0.8M model,
# so nanoGPT's warmup and round one's rate stay. Not yet measured on a GPU: the model, data, steps and dropout are
# nanoGPT's; `python -m pytest -m gpu` trains it.
# python data/shakespeare_char/prepare.py && python train.py config/train_shakespeare_char_muon.py
base_config = "train_shakespeare_char.py"
out_dir = "out-shakespeare-char-muon"
optimizer = "muon"
muon_learning_rate = 0.01
normuon = True
learning_rate = 3e-3  # AdamW's, for the token and position tables, norms and biases
min_lr = 1e-4 * learning_rate / 1e-3  # nanoGPT's depth of decay, a tenth of the peak (as ablate.py scales it)
lr_schedule = "wsd"
