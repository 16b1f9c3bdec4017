"""``rmt_scaling``'s XLA-measured FLOPs per token are the whole train step's, on any mesh.

The experiment compiles each model's train step once, on the run's mesh, and hands it to the
training and the timer. XLA's cost analysis of a sharded step is per device, and every device of a
data-parallel step repeats the replicated optimizer update, so ``per device x devices`` is not the
step's count. The reference here is the same train step (the loop's program,
:func:`jaxlab.core.step.build_train_program`) compiled on a one-device mesh, through the core
path rather than the experiment's; the suite runs with 8 simulated devices, so the experiment's own
mesh is sharded.
"""

import jax
from flax import nnx

from jaxlab.core import experiment
from jaxlab.core.aot import compile_train_step
from jaxlab.core.mesh import AxisRules, MeshConfig, make_mesh
from jaxlab.core.step import build_train_program
from jaxlab.lm.task import LMTask, fit_vocab
from jaxlab.lm.transformer import Transformer
from tests.conftest import REPO


def test_measured_flops_are_the_one_device_count_on_a_sharded_mesh():
    exp = experiment.load(REPO / "experiments", "rmt_scaling")
    cfg = exp.get_config("smoke")
    mesh, rules = make_mesh(cfg.mesh), AxisRules()
    assert mesh.size > 1, "needs the suite's simulated devices"
    tcfg = fit_vocab(cfg.pairs()[0][0], cfg.data)
    arm = exp._arm(tcfg, cfg, mesh, rules)
    batch = arm.task.eval_batches(cfg.train.batch_size, 1)[0]
    got = exp._describe(arm, batch, mesh, rules, cfg)["measured_train_flops_per_token"]

    one, one_rules = make_mesh(MeshConfig(data=1)), AxisRules()
    task = LMTask(
        build=lambda r: Transformer(tcfg, rngs=r), seq_len=tcfg.seq_len, z_loss=cfg.z_loss
    )
    with jax.set_mesh(one), nnx.logical_axis_rules(one_rules.as_tuple()):
        program = build_train_program(task, cfg.train, one, one_rules, init_key=jax.random.key(0))
    shapes = {k: (v.shape, v.dtype) for k, v in batch.items()}
    want = compile_train_step(program, one, one_rules, shapes)["flops_per_device"]
    assert got == want / batch["inputs"].size
