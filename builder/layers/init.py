"""Weight initialisation for Transformer stacks (GPT-2, Radford et al., 2019, 2.3).

Every linear and embedding weight starts N(0, 0.02); the projections that write into the residual stream
(attention output, FFN down) start N(0, 0.02 / sqrt(2 N)) for N layers, so the stream's variance does not
grow with depth. PyTorch's default (Kaiming-uniform) gives sublayer outputs far larger than the 0.02-scale
token embeddings, which drowns the token identity early in training and slows copy-like tasks.
"""

import math

from torch import nn

STD = 0.02
RESIDUAL_OUTPUTS = ("out_proj", "down")


def init_transformer_weights(model: nn.Module, *, n_layers: int) -> None:
    residual_std = STD / math.sqrt(2 * n_layers)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            std = residual_std if name.rsplit(".", 1)[-1] in RESIDUAL_OUTPUTS else STD
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=STD)
