"""`tether bench`: time PPO iterations on random-init Llama models and account for the FLOPs.

:mod:`tether.bench.setup` builds the models, tokenizer and prompts; :mod:`tether.bench.flops`
counts the work PPO needs per phase; :mod:`tether.bench.peak` measures this machine's matmul
peak; :mod:`tether.bench.runner` runs :func:`~tether.loops.rl_run.rl_trainer` and reports;
:mod:`tether.bench.shapes` has real architectures' shapes (``--model``) and their tokenizer;
:mod:`tether.bench.padding` times one stage's step padded vs packed (``--stage``).
"""

from tether.bench.flops import ModelDims, iteration_flops
from tether.bench.setup import SIZES

__all__ = ["SIZES", "ModelDims", "iteration_flops"]
