"""AdamW with weight decay on the matrices of linear maps only.

Decay pulls weights towards zero; on a LayerNorm gain or a bias that is a bias towards a degenerate model,
and on an embedding row it penalises rare tokens more than frequent ones. So, as nanoGPT and minGPT do
(Karpathy, `configure_optimizers`), only the weights of `nn.Linear` layers decay; norms, biases,
embeddings (token, position, relative-position tables) and anything tied to an embedding (GPT's LM head)
do not.
"""

import torch
from torch import nn

from onnxformer.runtime.errors import ConfigError

BETAS = (0.9, 0.98)


def parameter_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(decay, no_decay): every trainable parameter of `model` in exactly one of the two, in model order."""
    linear = set()
    embedding = set()
    for module in model.modules():
        if isinstance(module, nn.Linear):
            linear.add(id(module.weight))
        elif isinstance(module, nn.Embedding):
            embedding.add(id(module.weight))
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for parameter in model.parameters():  # deduplicated: a tied weight appears once
        if not parameter.requires_grad:
            continue
        is_matrix = id(parameter) in linear and id(parameter) not in embedding
        (decay if is_matrix else no_decay).append(parameter)
    return decay, no_decay


def make_optimizer(model: nn.Module, *, learning_rate: float, weight_decay: float) -> torch.optim.AdamW:
    decay, no_decay = parameter_groups(model)
    if not decay and not no_decay:
        raise ConfigError(f"{type(model).__name__} has no trainable parameters; nothing to train")
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=BETAS)
