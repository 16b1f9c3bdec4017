"""The networks of WARMPOT: a feature extractor f and a linear classifier g (Flax NNX).

The paper (Sec. 5) uses a ResNet-50 backbone with a 256-wide bottleneck as f and a linear g; on the
64-pixel digits an MLP plays the backbone's part. The two are one module so one optimizer trains
both; ``features`` gives f(x) (the space the transport cost measures), ``__call__`` the logits.
:class:`Head` is what trains on frozen features: the code's bottleneck (one linear layer, no
ReLU) and linear classifier on top of a fixed backbone's output.
"""

from __future__ import annotations

from typing import Literal

import jax
from flax import nnx
from jaxtyping import Array, Float

__all__ = ["Head", "HeadKind", "Network"]

#: The kind of trained head (see :class:`Head`): the authors' or jaxlab's earlier one.
HeadKind = Literal["authors", "pada_relu"]
# kind: (bottleneck kernel init, classifier kernel init); biases start at 0 in both (flax's
# default, the authors' `nn.init.zeros_`). torch's `xavier_normal_` draws an untruncated normal
# (flax's `xavier_normal` truncates at two standard deviations), hence `variance_scaling`.
_XAVIER_NORMAL = nnx.initializers.variance_scaling(1.0, "fan_avg", "normal")
INITS = {
    "authors": (_XAVIER_NORMAL, _XAVIER_NORMAL),
    "pada_relu": (nnx.initializers.normal(0.005), nnx.initializers.normal(0.01)),
}


class Network(nnx.Module):
    """f: ``D → hidden → features`` (ReLU), g: ``features → classes``."""

    def __init__(self, d_in: int, hidden: int, features: int, classes: int, *, rngs: nnx.Rngs):
        self.f1 = nnx.Linear(d_in, hidden, rngs=rngs)
        self.f2 = nnx.Linear(hidden, features, rngs=rngs)
        self.g = nnx.Linear(features, classes, rngs=rngs)

    def features(self, x_BD: Float[Array, "B D"]) -> Float[Array, "B F"]:
        return jax.nn.relu(self.f2(jax.nn.relu(self.f1(x_BD))))

    def classify(self, z_BF: Float[Array, "B F"]) -> Float[Array, "B L"]:
        return self.g(z_BF)

    def __call__(self, x_BD: Float[Array, "B D"]) -> Float[Array, "B L"]:
        return self.classify(self.features(x_BD))


class Head(nnx.Module):
    """f: ``D → features`` (the bottleneck), g: ``features → classes``, on frozen inputs.

    ``kind="authors"`` (the default) is the authors' Office-Home head (``ResNetFc_OfficeHome`` in
    their ``network.py``): the bottleneck is one ``Linear`` layer with no nonlinearity after it,
    so ``f(x) = W_f x + b_f`` is both the feature the cost ``M`` measures and the classifier's
    input; both layers start from ``xavier_normal_`` (an untruncated ``N(0, 2 / (fan_in +
    fan_out))``, gain 1) with zero biases, their ``init_weights``. ``kind="pada_relu"`` is this
    head as jaxlab first had it: a ReLU after the bottleneck and weights ``N(0, 0.005²)`` in the
    bottleneck, ``N(0, 0.01²)`` in the classifier, biases 0 — the initialisation of PADA's
    ``ResNetFc`` (Cao et al., ECCV 2018), not the authors' (CDAN's ``ResNetFc``, which theirs
    follows, uses ``xavier_normal_`` as well).

    Args:
      d_in: width D of the frozen features fed in.
      features: width F of the bottleneck (the authors' 256).
      classes: number of source classes L.
      kind: ``"authors"`` or ``"pada_relu"`` (above).
      rngs: the initialisation's random stream.
    """

    def __init__(
        self, d_in: int, features: int, classes: int, *, kind: HeadKind = "authors",
        rngs: nnx.Rngs,
    ):  # fmt: skip
        if kind not in INITS:
            raise ValueError(f"Head kind={kind!r} is unknown; use one of {tuple(INITS)}")
        init_f, init_g = INITS[kind]
        self.relu = kind == "pada_relu"
        self.f1 = nnx.Linear(d_in, features, kernel_init=init_f, rngs=rngs)
        self.g = nnx.Linear(features, classes, kernel_init=init_g, rngs=rngs)

    def features(self, x_BD: Float[Array, "B D"]) -> Float[Array, "B F"]:
        z_BF = self.f1(x_BD)
        return jax.nn.relu(z_BF) if self.relu else z_BF

    def classify(self, z_BF: Float[Array, "B F"]) -> Float[Array, "B L"]:
        return self.g(z_BF)

    def __call__(self, x_BD: Float[Array, "B D"]) -> Float[Array, "B L"]:
        return self.classify(self.features(x_BD))
