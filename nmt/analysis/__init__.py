"""The paper's attention analyses, in one package.

- attention_checks.py: `nmt attention-checks`' measurements: BLEU with the attention perturbed (an RNN's
  weights uniform, permuted, one-hot) or ablated (a Transformer's heads silenced, made uniform), and the
  attention's agreement with a word aligner (alignment.py: eflomal and the argmax agreement counts);
- attention_scaling.py: `nmt attention-scaling`'s statistics of scores, weights and score gradients;
- attention_stats.py: the attention entropy (one rule for both) and `nmt experiment`'s attention diagnostics;
- attention_report.py: both analyses' Markdown and figures;
- hooks.py: how they reach a model's attention.

The hooks are owned here, not kept as state in the models' hot path. A model names, in `attention_points()`
(nmt/models/interface.py), the `AttentionWeights` module each attention computes its weights with, and for
multi-head attention the output projection whose input holds the heads side by side; hooks.py registers torch
forward hooks on them for the duration of a `with` block (a hook's returned output replaces the weights, a
pre-hook's returned inputs replace the scores or the heads' outputs; one records calls) and removes them after.
Without a hook a model computes exactly what it computes in training (tests/test_hooks.py checks losses and
gradients bit for bit); the Transformer's only question, `softmax.observed`, makes it write its
cross-attention out rather than call the fused kernel while it is hooked. What the analyses need of a model
(its switches, its views, its score steps) is computed here from those points, so models never import this
package and the analyses never ask which architecture a model is.

Layering: above models, decoding, evaluation and rundir (and training, which it does not need: the model at
initialisation that attention-scaling measures is built by compare/); below compare, whose attention_checks.py and attention_scaling.py choose the runs, the test
set and where the files go, and commands; nothing else imports it (tests/test_layout.py). The paper's
long-sentence checks (nmt/evaluation/effect.py) stay in evaluation: `nmt evaluate`'s report and `nmt score`
use them on strings, and evaluation may not import upward.
"""
