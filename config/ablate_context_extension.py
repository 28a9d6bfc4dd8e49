# Longer context for a trained model (docs/context_extension.md, issue 31): bases trained at block_size 64
# (learned, sinusoidal, rope, alibi; 3 seeds, 2000 steps each), extended to 128 and 256 by every method that applies
# to their encoding (learned: interpolate, copy; sinusoidal: keep, interpolate; rope: keep, interpolate, ntk, yarn;
# alibi: keep), each scored as extended (max_iters=0) and after a finetune of 200 steps (the same for every method:
# warmup 20, peak 3e-4, the base's schedule shape). A finetune step trains on as many tokens as a base step (batch 6
# at 128, 3 at 256: 768 tokens). Every model is scored on the TEST split at 64, 128 and 256, both protocols, the
# sliding window 64 (stride 32) for all; the baseline is the unextended base under its sliding window (the family
# "finetune against its base's sliding window"), and its control: the base trained the same 200 steps more at 64
# (the family "finetune against its control's sliding window").
# Planned: 4 bases x 3 seeds x 2000 = 24,000 steps, 9 methods x 2 lengths x 3 seeds x 200 = 10,800 finetune
# steps, 4 controls x 3 seeds x 200 = 2,400: 37,200 steps in all (the 54 unfinetuned extensions train none), and 132
# evaluations.
# python data/shakespeare_char/prepare.py --input=PATH --out_dir=data/shakespeare_char   (or with network, neither)
# python ablate.py config/ablate_context_extension.py
base_config = "ablate_positions_base.py"  # the baby model, the schedule and the evaluation; the lines below change them
study_dir = "docs/context_extension"  # its records are committed there (checkpoints are not)
variants = [
    "learned",
    "sinusoidal",
    "rope",
    "alibi",
    "learned block_size=128 batch_size=6 extend_positions=interpolate max_iters=0 warmup_iters=0 from_cell=learned",
    "learned block_size=128 batch_size=6 extend_positions=interpolate max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=learned",
    "learned block_size=128 batch_size=6 extend_positions=copy max_iters=0 warmup_iters=0 from_cell=learned",
    "learned block_size=128 batch_size=6 extend_positions=copy max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=learned",
    "learned block_size=256 batch_size=3 extend_positions=interpolate max_iters=0 warmup_iters=0 from_cell=learned",
    "learned block_size=256 batch_size=3 extend_positions=interpolate max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=learned",
    "learned block_size=256 batch_size=3 extend_positions=copy max_iters=0 warmup_iters=0 from_cell=learned",
    "learned block_size=256 batch_size=3 extend_positions=copy max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=learned",
    "sinusoidal block_size=128 batch_size=6 extend_positions=keep max_iters=0 warmup_iters=0 from_cell=sinusoidal",
    "sinusoidal block_size=128 batch_size=6 extend_positions=keep max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=sinusoidal",
    "sinusoidal block_size=128 batch_size=6 extend_positions=interpolate max_iters=0 "
    "warmup_iters=0 from_cell=sinusoidal",
    "sinusoidal block_size=128 batch_size=6 extend_positions=interpolate max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=sinusoidal",
    "sinusoidal block_size=256 batch_size=3 extend_positions=keep max_iters=0 warmup_iters=0 from_cell=sinusoidal",
    "sinusoidal block_size=256 batch_size=3 extend_positions=keep max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=sinusoidal",
    "sinusoidal block_size=256 batch_size=3 extend_positions=interpolate max_iters=0 "
    "warmup_iters=0 from_cell=sinusoidal",
    "sinusoidal block_size=256 batch_size=3 extend_positions=interpolate max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=sinusoidal",
    "rope block_size=128 batch_size=6 extend_positions=keep max_iters=0 warmup_iters=0 from_cell=rope",
    "rope block_size=128 batch_size=6 extend_positions=keep max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "rope block_size=128 batch_size=6 extend_positions=interpolate max_iters=0 warmup_iters=0 from_cell=rope",
    "rope block_size=128 batch_size=6 extend_positions=interpolate max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "rope block_size=128 batch_size=6 extend_positions=ntk max_iters=0 warmup_iters=0 from_cell=rope",
    "rope block_size=128 batch_size=6 extend_positions=ntk max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "rope block_size=128 batch_size=6 extend_positions=yarn max_iters=0 warmup_iters=0 from_cell=rope",
    "rope block_size=128 batch_size=6 extend_positions=yarn max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "rope block_size=256 batch_size=3 extend_positions=keep max_iters=0 warmup_iters=0 from_cell=rope",
    "rope block_size=256 batch_size=3 extend_positions=keep max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "rope block_size=256 batch_size=3 extend_positions=interpolate max_iters=0 warmup_iters=0 from_cell=rope",
    "rope block_size=256 batch_size=3 extend_positions=interpolate max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "rope block_size=256 batch_size=3 extend_positions=ntk max_iters=0 warmup_iters=0 from_cell=rope",
    "rope block_size=256 batch_size=3 extend_positions=ntk max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "rope block_size=256 batch_size=3 extend_positions=yarn max_iters=0 warmup_iters=0 from_cell=rope",
    "rope block_size=256 batch_size=3 extend_positions=yarn max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "alibi block_size=128 batch_size=6 extend_positions=keep max_iters=0 warmup_iters=0 from_cell=alibi",
    "alibi block_size=128 batch_size=6 extend_positions=keep max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=alibi",
    "alibi block_size=256 batch_size=3 extend_positions=keep max_iters=0 warmup_iters=0 from_cell=alibi",
    "alibi block_size=256 batch_size=3 extend_positions=keep max_iters=200 "
    "warmup_iters=20 learning_rate=0.0003 from_cell=alibi",
    # The controls: each base trained the same 200 steps more at its own length, 64 (batch 12: 768 tokens a step, as
    # every finetune), so that a finetune's gain from reading further is told apart from its gain from training more
    "learned max_iters=200 warmup_iters=20 learning_rate=0.0003 from_cell=learned",
    "sinusoidal max_iters=200 warmup_iters=20 learning_rate=0.0003 from_cell=sinusoidal",
    "rope max_iters=200 warmup_iters=20 learning_rate=0.0003 from_cell=rope",
    "alibi max_iters=200 warmup_iters=20 learning_rate=0.0003 from_cell=alibi",
]
seeds = 3
eval_split = "test"
eval_multipliers = [1.0, 2.0, 4.0]  # 64, 128, 256 for every model, extended or not (from_cell: the base's lengths)
reference = "learned"

max_iters = 2000  # the bases'; each finetune cell sets its own
lr_decay_iters = 2000
