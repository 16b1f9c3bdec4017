"""The networks of WARMPOT: a feature extractor f and a linear classifier g (Flax NNX).

The paper (Sec. 5) uses a ResNet-50 backbone with a 256-wide bottleneck as f and a linear g; on the
64-pixel digits an MLP plays the backbone's part. The two are one module so one optimizer trains
both; ``features`` gives f(x) (the space the transport cost measures), ``__call__`` the logits.
:class:`Head` is what trains on frozen features: the code's bottleneck (one ReLU layer) and linear
classifier on top of a fixed backbone's output.
"""

from __future__ import annotations

import jax
from flax import nnx
from jaxtyping import Array, Float

__all__ = ["Head", "Network"]


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
    """f: ``D → features`` (ReLU, the bottleneck), g: ``features → classes``, on frozen inputs.

    Initialised as the authors' head (their ``ResNetFc``, from CDAN's code): weights
    ``N(0, 0.005²)`` in the bottleneck and ``N(0, 0.01²)`` in the classifier, biases 0, so the
    first predictions are near uniform and the label term of the cost starts flat instead of
    steering the plan by a random classifier's confident guesses.
    """

    def __init__(self, d_in: int, features: int, classes: int, *, rngs: nnx.Rngs):
        normal = nnx.initializers.normal
        self.f1 = nnx.Linear(d_in, features, kernel_init=normal(0.005), rngs=rngs)
        self.g = nnx.Linear(features, classes, kernel_init=normal(0.01), rngs=rngs)

    def features(self, x_BD: Float[Array, "B D"]) -> Float[Array, "B F"]:
        return jax.nn.relu(self.f1(x_BD))

    def classify(self, z_BF: Float[Array, "B F"]) -> Float[Array, "B L"]:
        return self.g(z_BF)

    def __call__(self, x_BD: Float[Array, "B D"]) -> Float[Array, "B L"]:
        return self.classify(self.features(x_BD))
