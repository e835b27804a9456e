"""llamanb.model.token_ids: the one validator of token ids. Each mistake is one LlamanbError line that
says what was expected, and every entry point (engine, generate, the serving queue, the TCP
interpreter) says the same; the engine's and generate's own cases are in test_api_misuse.py."""
import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.serve.dry import DryEngine
from llamanb.serve.runner import BatchRunner
from llamanb.model.token_ids import token_batch, token_ids

V = 100

BAD = [
    ("hello", ["got text", "encode it first"]),
    (b"hi", ["got text"]),
    (7, ["one int", "[7]"]),
    (None, ["list of integer token ids", "NoneType"]),
    ([], ["empty prompt"]),
    ([3.5, 4], ["integers", "float 3.5"]),
    ([True, False], ["integers", "bool"]),
    ([3, None], ["integers", "None"]),
    ([[3, 4], [5, 6]], ["flat list", "(2, 2)"]),
    ([3, V], ["token id 100", "out of range", "vocabulary [0, 100)"]),
    ([-1, 3], ["token id -1", "out of range"]),
    (np.array([2 ** 64 - 1], dtype=np.uint64), ["token id 18446744073709551615", "out of range"]),
]


def one_line(fn, fragments):
    with pytest.raises(LlamanbError) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg and all(f in msg for f in fragments), msg
    return msg


@pytest.mark.parametrize("ids, fragments", BAD)
def test_bad_ids_are_one_line(ids, fragments):
    msg = one_line(lambda: token_ids(ids, V, "prompt_ids"), fragments)
    assert msg.startswith("prompt_ids: ")                     # names what was being checked


@pytest.mark.parametrize("ids, fragments", BAD)
def test_the_serving_queue_says_the_same(ids, fragments):
    runner = BatchRunner(DryEngine(), slots=2, block=16, kv_positions=64)
    runner.engine.config = runner.engine.config.replace(vocab=V)
    one_line(lambda: runner.add(ids, 4, name="q1"), fragments + ["request q1"])
    assert not runner.scheduler.busy                          # nothing was queued


def test_good_ids_come_back_as_int64():
    for ids in ([3, 4], (3, 4), np.array([3, 4], dtype=np.int32), np.array([3, 4], dtype=np.uint8),
                [np.int64(3), 4]):
        got = token_ids(ids, V)
        assert got.dtype == np.int64 and got.tolist() == [3, 4]
    assert token_ids([], V, allow_empty=True).tolist() == []


def test_a_batch_shares_one_length():
    assert token_batch([[3, 4], [5, 6]], V).tolist() == [[3, 4], [5, 6]]
    assert token_batch([3, 4], V).tolist() == [[3, 4]]                       # one sequence
    one_line(lambda: token_batch([[3, 4, 5], [5, 6]], V), ["one length", "[2, 3]"])
    one_line(lambda: token_batch([[3, 4], [5, V]], V), ["prompts[1]", "token id 100"])
    one_line(lambda: token_batch("hi", V), ["got text"])
