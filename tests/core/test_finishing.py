"""The runner's block for writes left finishing (a run's last checkpoint): what is handed over runs
at the block's end, in order, before anything else is handed over, and every one runs even when one
fails; outside a block nothing is handed over."""

import pytest

from jaxlab.core import finishing


def test_outside_a_block_nothing_is_handed_over():
    assert finishing.defer(lambda: pytest.fail("ran")) is False
    finishing.finish_now()  # nothing to finish


def test_the_block_finishes_in_order_and_one_at_a_time():
    done = []
    with finishing.later():
        assert finishing.defer(lambda: done.append("a")) is True
        assert done == []  # still handed over
        finishing.defer(lambda: done.append("b"))  # the first one is finished before
        assert done == ["a"]
        finishing.defer(lambda: done.append("c"))
        assert done == ["a", "b"]
    assert done == ["a", "b", "c"]
    assert finishing.defer(lambda: None) is False  # the block is over


def test_after_pending_waits_behind_what_was_handed_over_and_only_then():
    done = []
    assert finishing.after_pending(lambda: pytest.fail("ran")) is False  # outside a block
    with finishing.later():
        assert finishing.after_pending(lambda: pytest.fail("ran")) is False  # nothing pending
        finishing.defer(lambda: done.append("save"))
        assert finishing.after_pending(lambda: done.append("unlock")) is True
        assert done == []  # neither is run now: the save goes on
    assert done == ["save", "unlock"]


def test_finish_now_runs_what_was_handed_over():
    done = []
    with finishing.later():
        finishing.defer(lambda: done.append(1))
        finishing.finish_now()
        assert done == [1]
    assert done == [1]  # not twice


def test_a_failed_finisher_raises_where_it_runs_and_the_next_is_still_kept():
    done = []

    def failing():
        done.append("first")
        raise ValueError("first")

    with finishing.later():
        finishing.defer(failing)
        with pytest.raises(ValueError, match="first"):
            finishing.defer(lambda: done.append("second"))  # the first one finishes here
        assert done == ["first"]
    assert done == ["first", "second"]  # kept despite the error, finished at the block's end


def test_an_error_at_the_blocks_end_is_raised_there():
    with pytest.raises(ValueError, match="late"):
        with finishing.later():
            finishing.defer(lambda: (_ for _ in ()).throw(ValueError("late")))


def test_a_block_ended_by_an_error_still_finishes():
    done = []
    with pytest.raises(KeyError):
        with finishing.later():
            finishing.defer(lambda: done.append("saved"))
            raise KeyError("the experiment failed")
    assert done == ["saved"]


def test_blocks_nest():
    done = []
    with finishing.later():
        finishing.defer(lambda: done.append("outer"))
        with finishing.later():
            finishing.defer(lambda: done.append("inner"))
        assert done == ["inner"]
    assert done == ["inner", "outer"]
