"""The scores of Zhang et al. (ICML 2025), Sec. 5, on hand-counted examples: TPR/FPR of the
selected features and the output network's relative Frobenius and edge errors."""

import numpy as np

from jaxlab.methods.nard.scores import network_errors, support_rates


def test_support_rates_by_hand():
    support = [True, True, True, False, False, False, False, False]
    selected = [True, False, True, True, False, False, False, False]
    # 2 of the 3 true features found; 1 of the 5 false ones selected
    assert support_rates(selected, support) == (2 / 3, 1 / 5)


def test_network_errors_by_hand():
    true = np.array([[2.0, 0.5, 0.0, 0.0], [0.5, 2.0, 0.0, 0.3], [0.0, 0.0, 2.0, 0.0],
                     [0.0, 0.3, 0.0, 2.0]])  # fmt: skip  # true edges: (0,1), (1,3)
    est = true.copy()
    est[1, 3] = est[3, 1] = 0.0  # one edge missed
    est[0, 2] = est[2, 0] = 0.1  # one spurious edge
    est[2, 2] = 3.0
    frob, edge = network_errors(est, true)
    want_frob = np.sqrt(2 * 0.3**2 + 2 * 0.1**2 + 1.0**2) / np.sqrt(4 * 4 + 2 * 0.25 + 2 * 0.09)
    np.testing.assert_allclose(frob, want_frob, rtol=1e-12)
    assert edge == 2 / 6  # 2 of the m(m − 1)/2 = 6 pairs disagree
    # an entry below tol · max diagonal is not an edge
    est[0, 2] = est[2, 0] = 1e-7
    assert network_errors(est, true)[1] == 1 / 6
