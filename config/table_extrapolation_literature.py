# The literature family of the extrapolation study (docs/positions_extrapolation/README.md, "Literature vs this
# study"): every pair a literature verdict there rests on. A pair the study planned (a cell against learned or ALiBi,
# a cell's whole window against its sliding one) keeps Holm's correction over its own family of results.md; the
# others, chosen after seeing the results, form the literature family, with Holm's correction over all of them.
# Non-overlapping windows unless "(sliding)"; @L: the eval length (64 = 1x, 512 = 8x).
# python -m study.table config/table_extrapolation_literature.py
study = "docs/positions_extrapolation"
pairs = [
    "kerple log lr 0.003 @512 − kerple power lr 0.001 @512",  # Chi et al.: log better than power
    "kerple log lr 0.003 @512 − alibi lr 0.003 @512",  # Chi et al.: log better than ALiBi
    "kerple log lr 0.003 @512 − t5 64 lr 0.003 @512",  # Chi et al.: log better than T5
    "kerple log lr 0.003 @512 − kerple log lr 0.003 (sliding) @512",  # Chi et al.: log reads past a window
    "fire lr 0.001 @512 − rope lr 0.003 @512",  # Li et al.: FIRE better than rope
    "fire lr 0.001 @512 − alibi lr 0.003 @512",  # Li et al.: FIRE better than ALiBi
    "fire lr 0.001 @512 − kerple log lr 0.003 @512",  # Li et al.: FIRE better than KERPLE
    "fire lr 0.001 @512 − t5 64 lr 0.003 @512",  # Li et al.: FIRE better than T5
    "fire lr 0.001 @128 − alibi lr 0.003 @128",  # the same at 2x
    "fire lr 0.001 @128 − kerple log lr 0.003 @128",  # the same at 2x
    "cope lr 0.001 @128 − cope lr 0.001 @64",  # Golovneva et al.: CoPE's loss keeps falling past 1x
    "cope lr 0.001 @64 − learned lr 0.003 @64",  # Golovneva et al.: CoPE below absolute positions at 1x
    "rope random_positions=512 lr 0.003 @512 − rope lr 0.003 @512",  # Ruoss et al.: random positions help past 1x
    "sinusoidal 0.1 random_positions=512 lr 0.01 @512 − sinusoidal 0.1 lr 0.003 @512",  # the same
    "p_rope lr 0.001 @64 − rope lr 0.003 @64",  # Barbero et al.: p-RoPE at least as good as rope at 1x
    "p_rope lr 0.001 @64 − partial_rope lr 0.003 @64",  # Barbero et al.: and better than partial rotary
    "p_rope lr 0.001 @512 − rope lr 0.003 @512",  # Barbero et al. (expected): better at long context
    "xpos lr 0.01 @512 − rope lr 0.003 @512",  # Sun et al.: xPos degrades less than rope
    "xpos lr 0.01 @64 − rope lr 0.003 @64",  # Sun et al.: xPos below rope at 1x
    "partial_rope lr 0.003 @64 − rope lr 0.003 @64",  # Black et al.: rotary on 25% strikes the best balance
    "partial_rope lr 0.003 @512 − rope lr 0.003 @512",  # the same at 8x
    "t5 64 lr 0.003 @512 − rope lr 0.003 @512",  # Press et al.: T5's bias degrades more slowly than rotary
    "pope lr 0.001 @64 − rope lr 0.003 @64",  # Gopalakrishnan et al.: PoPE below rope in evaluation loss
    "pope lr 0.001 @512 − rope lr 0.003 @512",  # Gopalakrishnan et al.: PoPE extrapolates where rope degrades
    "fox lr 0.001 @64 − rope lr 0.003 @64",  # Lin et al.: FoX below the (rope) Transformer
    "fox lr 0.001 @512 − rope lr 0.003 @512",  # Lin et al.: and past the training length
    "layer_rope lr 0.003 @512 − rope lr 0.003 @512",  # Yang et al.: NoPE layers beside rope ones read longer text
]
