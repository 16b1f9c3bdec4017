"""ALiBi slopes by value: Press et al.'s recipe and the RMT authors' geometric sequence."""

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.nn.attention import alibi_slopes


@pytest.mark.parametrize("kind", ["press", "geometric"])
@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16])
def test_kinds_agree_on_powers_of_two(kind, heads):
    np.testing.assert_allclose(
        alibi_slopes(heads, kind), [2.0 ** (-8 * h / heads) for h in range(1, heads + 1)], rtol=1e-6
    )


def test_press_interleaves_for_six_heads():
    # Largest power of two below 6 is 4: 2^-2, 2^-4, 2^-6, 2^-8; then every other slope of the
    # 8-head sequence 2^-1, 2^-2, ...: 2^-1, 2^-3.
    np.testing.assert_allclose(
        alibi_slopes(6, "press"), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3], rtol=1e-6
    )


@pytest.mark.parametrize("heads", [6, 12, 14])
def test_geometric_is_one_sequence_from_2_to_the_minus_8_over_h_to_2_to_the_minus_8(heads):
    slopes = np.asarray(alibi_slopes(heads, "geometric"), np.float64)
    ratio = 2.0 ** ((-8 + 8 / heads) / (heads - 1))  # (2^-8 / 2^(-8/H))^(1/(H-1))
    np.testing.assert_allclose(slopes, 2.0 ** (-8 / heads) * ratio ** np.arange(heads), rtol=1e-6)
    assert not np.allclose(np.sort(slopes), np.sort(np.asarray(alibi_slopes(heads, "press"))))


def test_bad_inputs():
    with pytest.raises(ConfigError, match="unknown ALiBi slopes 'linear'"):
        alibi_slopes(4, "linear")
    with pytest.raises(ConfigError, match="at least one head"):
        alibi_slopes(0)
