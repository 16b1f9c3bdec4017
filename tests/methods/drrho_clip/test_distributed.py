"""Local anchors against all-gathered candidates equal the single-device loss on the concatenated
batch: on 8 simulated CPU devices, and with two ``jax.distributed`` processes of 4 devices each."""

import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxlab.core.mesh import MeshConfig, make_mesh
from jaxlab.methods.drrho_clip import losses as L
from jaxlab.methods.drrho_clip.distributed import sharded_clip_loss, sharded_drrho_loss
from jaxlab.testing.processes import cpu_env, free_port
from tests.methods.drrho_clip.two_process_loss import global_inputs


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(MeshConfig())


@pytest.mark.parametrize("with_ref", [True, False], ids=["drrho", "gcl"])
def test_eight_devices_equal_one(mesh, with_ref):
    img, txt, rimg, rtxt = global_inputs()
    if not with_ref:
        rimg = rtxt = None

    def single(i, t):
        return L.drrho_loss(i, t, rimg, rtxt, tau=0.1, eps=1e-3)

    def sharded(i, t, ri, rt):
        return sharded_drrho_loss(i, t, ri, rt, mesh=mesh, tau=0.1, eps=1e-3)

    v1, g1 = jax.jit(jax.value_and_grad(single, (0, 1)))(img, txt)
    f8 = jax.jit(jax.value_and_grad(sharded, (0, 1)))
    v8, g8 = f8(img, txt, rimg, rtxt)
    np.testing.assert_allclose(v8, v1, rtol=1e-6)
    for a, b in zip(g8, g1, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # The positives really sit at offset process_index × local batch: a batch reordered across
    # devices gives another loss (a wrong offset could not tell the two apart).
    perm = np.roll(np.arange(16), 2)
    other, _ = f8(img, txt[perm], rimg, None if rtxt is None else rtxt[perm])
    assert not np.isclose(other, v1)


def test_clip_eight_devices_equal_one(mesh):
    img, txt, _, _ = global_inputs()
    v1, g1 = jax.jit(jax.value_and_grad(lambda i: L.clip_loss(i, txt, tau=0.1)))(img)
    v8, g8 = jax.jit(jax.value_and_grad(lambda i: sharded_clip_loss(i, txt, mesh=mesh, tau=0.1)))(
        img
    )
    np.testing.assert_allclose(v8, v1, rtol=1e-6)
    np.testing.assert_allclose(g8, g1, rtol=1e-5, atol=1e-7)


def test_two_processes_equal_one(repo_root, tmp_path):
    port, out = free_port(), tmp_path / "two_process.npz"
    procs = []
    for i in range(2):
        env = cpu_env(
            4,
            JAXLAB_NUM_PROCESSES="2",
            JAXLAB_COORDINATOR=f"127.0.0.1:{port}",
            JAXLAB_PROCESS_ID=str(i),
            PYTHONPATH=str(repo_root),
        )
        cmd = [sys.executable, "-m", "tests.methods.drrho_clip.two_process_loss", str(out)]
        procs.append(
            subprocess.Popen(cmd, cwd=repo_root, env=env, stderr=subprocess.PIPE, text=True)
        )
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    got = np.load(out)
    img, txt, rimg, rtxt = global_inputs()
    f = lambda i, t: L.drrho_loss(i, t, rimg, rtxt, tau=0.1, eps=1e-3)  # noqa: E731
    value, (g_img, g_txt) = jax.jit(jax.value_and_grad(f, (0, 1)))(img, txt)
    np.testing.assert_allclose(got["value"], value, rtol=1e-6)
    np.testing.assert_allclose(got["g_img"], g_img, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["g_txt"], g_txt, rtol=1e-5, atol=1e-7)
