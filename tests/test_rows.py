"""Where a step's rows sit (llamanb.engine.rows), and the registry's first use."""
import numpy as np
import pytest

from llamanb import Engine
from llamanb.engine.registry import BACKENDS
from llamanb.engine.rows import RowPolicy
from llamanb.engine.step import PAD, Step
from llamanb.errors import LlamanbError


def _mixed():
    # a 5-token prompt, a decoding sequence, a 3-token prompt
    return Step.build([(0, 0, [1, 2, 3, 4, 5]), (1, 9, [7]), (2, 0, [4, 4, 4])])


def test_each_prompt_starts_at_a_multiple_of_row_align_and_the_step_pads_to_row_multiple():
    run = RowPolicy(row_align=8, row_multiple=16, pad_id=0).layout(_mixed())
    starts = {s.slot: s.row for s in run.segments}
    # by hand: prompt 0 at row 0 (rows 0-4), the decode row follows at 5 (one row: not aligned),
    # prompt 2 at the next multiple of 8 (rows 8-10); 11 rows pad to 16
    assert starts == {0: 0, 1: 5, 2: 8}
    assert run.rows == 16
    assert list(run.slots[:11]) == [0] * 5 + [1] + [PAD] * 2 + [2] * 3
    assert (run.slots[11:] == PAD).all()
    assert list(run.logit_rows) == [4, 5, 10]
    assert list(run.ids[run.slots != PAD]) == [1, 2, 3, 4, 5, 7, 4, 4, 4]


def test_decode_rows_run_unpadded_unless_batch_invariant():
    decode = Step.build([(0, 3, [1]), (1, 7, [2]), (2, 5, [3])])
    assert RowPolicy(row_align=8, row_multiple=16).layout(decode).rows == 3
    run = RowPolicy(row_align=8, row_multiple=16, batch_invariant=True).layout(decode)
    assert [s.row for s in run.segments] == [0, 8, 16] and run.rows == 32


def test_a_compiled_backend_takes_the_first_length_that_fits():
    policy = RowPolicy(prefill_lengths=(16, 64), row_multiple=16)
    assert policy.rows_for(Step.build([(0, 0, list(range(20)))])) == 64
    with pytest.raises(LlamanbError, match="compiled lengths"):
        policy.rows_for(Step.build([(0, 0, list(range(70)))]))


def test_batch_invariant_head_runs_at_the_row_multiple_and_returns_k_rows():
    seen = []

    def head(rows):
        seen.append(rows.shape)
        return rows[:, :2] * 2

    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = RowPolicy(row_multiple=8, batch_invariant=True).head(head, rows)
    assert seen == [(8, 2)] and out.shape == (3, 2) and (out == rows * 2).all()


def test_a_bad_option_is_one_line_even_on_a_backends_first_use(smollm, monkeypatch):
    """The registry imports a track's backend on first use; the option check must see it then."""
    monkeypatch.delitem(BACKENDS, "tcp", raising=False)
    with pytest.raises(LlamanbError, match="backend 'tcp'.*bogus"):
        Engine(smollm, "tcp", bogus=1)
