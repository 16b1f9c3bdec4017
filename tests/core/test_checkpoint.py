"""Checkpoints: a small replicated state is written without slicing it per replica and comes back
on its shardings; one written through orbax's StandardSave (as before the state had its own
handler) restores; damaged checkpoints in a multi-process run: only the primary process moves them
aside."""

import shutil

import pytest

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.config import TrainConfig
from jaxlab.core.loop import run_training
from jaxlab.testing.toy import ToyTask

CFG = TrainConfig(
    steps=4,
    batch_size=8,
    warmup_steps=3,
    checkpoint_every=2,
    eval_every=4,
    log_every=2,
    tensorboard=False,
)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A finished toy run whose newest checkpoint (step 4) is damaged."""
    workdir = tmp_path_factory.mktemp("run")
    run_training(ToyTask(), CFG, workdir, verbose=False)
    for path in (workdir / "checkpoints" / "4" / "state").rglob("*"):
        if path.is_file():
            path.write_bytes(b"garbage")
    return workdir


def _restore(workdir, **kw):
    """Restores like the loop does, with the Checkpointer options ``kw``."""
    import jax

    from jaxlab.core.loop import create_state
    from jaxlab.core.optim import make_optimizer

    task = ToyTask()
    _, abstract = jax.eval_shape(
        lambda k: create_state(task, make_optimizer(CFG), k), jax.random.key(0)
    )
    ckpt = Checkpointer(workdir / "checkpoints", **kw)
    try:
        return ckpt.restore(abstract, task.train_iterator(CFG.batch_size, 0)), ckpt.steps()
    finally:
        ckpt.close()


def test_other_processes_never_rename_and_wait_for_the_primary(damaged, tmp_path):
    shutil.copytree(damaged, tmp_path, dirs_exist_ok=True)
    calls = []
    restored, steps = _restore(tmp_path, primary=False, barrier=calls.append)
    assert restored.step == 2 and restored.fell_back_from == (4,)
    assert calls == ["jaxlab_damaged_checkpoints_moved"]
    assert (tmp_path / "checkpoints" / "4").exists()  # left for the primary process
    assert not list(tmp_path.glob("damaged-checkpoint-*"))


def test_the_listing_is_reloaded_after_the_barrier(damaged, tmp_path):
    """A non-primary process sees the primary's rename once the barrier returns."""
    shutil.copytree(damaged, tmp_path, dirs_exist_ok=True)

    def primary_renames_meanwhile(name):
        (tmp_path / "checkpoints" / "4").rename(tmp_path / "damaged-checkpoint-4")

    restored, steps = _restore(tmp_path, primary=False, barrier=primary_renames_meanwhile)
    assert restored.step == 2 and steps == [2]


def test_the_primary_process_moves_damaged_steps_aside(damaged, tmp_path):
    shutil.copytree(damaged, tmp_path, dirs_exist_ok=True)
    calls = []
    restored, steps = _restore(tmp_path, primary=True, barrier=calls.append)
    assert restored.step == 2 and steps == [2] and len(calls) == 1
    assert (tmp_path / "damaged-checkpoint-4").is_dir()


def _restored_with_next_batch(directory, abstract):
    """The newest checkpoint in ``directory`` restored onto ``abstract``, and the first batch the
    restored toy iterator yields."""
    fresh = ToyTask().train_iterator(CFG.batch_size, 0)
    ckpt = Checkpointer(directory)
    try:
        restored = ckpt.restore(abstract, fresh)
    finally:
        ckpt.close()
    return restored, next(fresh)


def test_small_replicated_state_saves_without_compiling_and_restores_on_its_shardings(tmp_path):
    """Orbax would write each replicated array in per-replica slices, each a compiled program;
    below MIN_REPLICA_SLICE_BYTES per slice the save compiles nothing."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxlab.testing.compiles import backend_compiles

    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    state = {f"w{i}": jnp.full((16, 3 + i), float(i)) for i in range(4)}  # 16 rows: 8 slices
    state = jax.device_put(state, NamedSharding(mesh, P()))
    state["rows"] = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh, P("data")))
    abstract = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state
    )
    iterator = ToyTask().train_iterator(CFG.batch_size, 0)
    ckpt = Checkpointer(tmp_path / "checkpoints")
    try:
        with backend_compiles() as compiles:
            ckpt.save(1, state, iterator, {"step": 1})
    finally:
        ckpt.close()
    assert compiles == []
    ckpt = Checkpointer(tmp_path / "checkpoints")
    try:
        restored = ckpt.restore(abstract, ToyTask().train_iterator(CFG.batch_size, 0))
    finally:
        ckpt.close()
    assert restored.step == 1 and restored.meta == {"step": 1}
    for name, value in state.items():
        assert restored.state[name].sharding == value.sharding
        np.testing.assert_array_equal(np.asarray(restored.state[name]), np.asarray(value))


def test_a_checkpoint_written_through_orbaxs_standard_save_restores(tmp_path):
    """Checkpoints written before the state got its own handler (orbax's ``StandardSave`` through
    a default manager, as jaxlab wrote them) still restore, state, data position and meta."""
    import grain
    import jax
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp

    state = {"w": jnp.arange(12.0).reshape(3, 4), "step": jnp.asarray(5)}
    iterator = ToyTask().train_iterator(CFG.batch_size, 0)
    next(iterator)  # the saved position is one batch in
    old = ocp.CheckpointManager(
        tmp_path / "checkpoints",
        options=ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False),
    )
    old.save(
        5,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=grain.checkpoint.CheckpointSave(iterator),
            meta=ocp.args.JsonSave({"step": 5}),
        ),
    )
    old.wait_until_finished()
    old.close()
    following = next(iterator)  # what the restored iterator must yield next
    abstract = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state
    )
    restored, first = _restored_with_next_batch(tmp_path / "checkpoints", abstract)
    assert restored.step == 5 and restored.meta == {"step": 5}
    for name, value in state.items():
        np.testing.assert_array_equal(np.asarray(restored.state[name]), np.asarray(value))
    np.testing.assert_array_equal(first["x"], following["x"])


def test_a_save_left_writing_keeps_the_state_and_position_it_was_given(tmp_path):
    """``save(wait=False)`` reads the iterator and copies the arrays before it returns: the
    iterator may move on and the arrays be deleted while the save is written."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    state = {"w": jnp.arange(50_000.0), "b": jnp.full((7, 3), 2.5)}
    want = {name: np.asarray(value).copy() for name, value in state.items()}
    iterator = ToyTask().train_iterator(CFG.batch_size, 0)
    reference = ToyTask().train_iterator(CFG.batch_size, 0)
    next(iterator), next(reference)  # the saved position is one batch in
    following = next(reference)
    ckpt = Checkpointer(tmp_path / "checkpoints")
    try:
        ckpt.save(1, state, iterator, {"step": 1}, wait=False)
        next(iterator), next(iterator)
        for value in state.values():
            value.delete()
        ckpt.wait()
        assert ckpt.steps() == [1]
    finally:
        ckpt.close()
    abstract = {
        name: jax.ShapeDtypeStruct(
            value.shape, value.dtype, sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0])
        )
        for name, value in want.items()
    }
    restored, first = _restored_with_next_batch(tmp_path / "checkpoints", abstract)
    for name, value in want.items():
        np.testing.assert_array_equal(np.asarray(restored.state[name]), value)
    np.testing.assert_array_equal(first["x"], following["x"])


def test_a_runs_last_save_goes_on_after_the_run_inside_the_runners_block(tmp_path):
    """Inside ``finishing.later()`` the loop's last save is handed to the block; a checkpointer
    opened meanwhile (here: on the same directory) finishes it first and lists the last step."""
    from jaxlab.core import finishing

    with finishing.later():
        run_training(ToyTask(), CFG, tmp_path, verbose=False)
        assert finishing._PENDING  # the last save was handed over, not waited for
        reader = Checkpointer(tmp_path / "checkpoints")
        assert not finishing._PENDING
        try:
            assert reader.steps()[-1] == CFG.steps
        finally:
            reader.close()
    # Outside a block the run's close waits: the last step is listed as soon as it returns.
    run_training(ToyTask(), CFG, tmp_path / "plain", verbose=False)
    assert (tmp_path / "plain" / "checkpoints" / str(CFG.steps)).is_dir()


def test_a_full_disk_at_a_deferred_save_is_one_line_where_it_finishes(tmp_path, monkeypatch):
    import errno

    import jax.numpy as jnp

    from jaxlab.core import finishing
    from jaxlab.core.errors import RunError

    ckpt = Checkpointer(tmp_path / "checkpoints")

    real_wait = ckpt.manager.wait_until_finished
    failures = []

    def full(*args, **kwargs):  # the first wait reports the full disk, as orbax's does
        real_wait()
        if not failures:
            failures.append(1)
            raise OSError(errno.ENOSPC, "No space left on device")

    iterator = ToyTask().train_iterator(CFG.batch_size, 0)
    with pytest.raises(RunError) as err:
        with finishing.later():
            ckpt.save(3, {"w": jnp.ones(4)}, iterator, {"step": 3}, wait=False)
            monkeypatch.setattr(ckpt.manager, "wait_until_finished", full)
            ckpt.close()  # handed over: nothing raised yet
    message = str(err.value)
    assert "\n" not in message and "saving checkpoint 3" in message
    assert message.startswith("no space left on the device of")
