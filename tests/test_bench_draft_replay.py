"""codecue_bench/draft_replay.py: rounds priced from teacher-forced rows, worked by hand."""
import pytest

from codecue_bench.draft_replay import fixed_k, replay_ms, speedup


def verify(width: int) -> float:
    return 30.0 + 2.0 * (width - 1)  # a one-token pass 30 ms, each verify row 2 ms more


RIGHT, WRONG = (1, 0.95, 1), (2, 0.95, 1)  # the draft model's pick the target's token, or not

CASES = [
    # (rows, k, expected ms)
    ([RIGHT] * 4, 0, 4 * 30.0),  # no drafts: target alone, one pass a token
    ([RIGHT] * 4, 3, 3 * 9 + 36.0),  # 3 drafts all right + the target's token: 4 tokens in one round
    # a round may draft up to the completion's last token (the verify's own token then lies past the end)
    ([RIGHT] * 5, 3, (3 * 9 + 36.0) + (1 * 9 + 32.0)),  # the fifth token: a round of its own, one draft
    ([WRONG, RIGHT, RIGHT], 2, (2 * 9 + 34.0) + (2 * 9 + 34.0)),  # first draft wrong: 1 token, then 2 drafted
    ([RIGHT, WRONG, RIGHT, RIGHT], 3, (3 * 9 + 36.0) + (2 * 9 + 34.0)),  # 1 right + the target's token, 2 left
]


@pytest.mark.parametrize("rows, k, expected", CASES)
def test_replay_prices_rounds_by_hand(rows, k, expected):
    assert replay_ms(rows, fixed_k(k), 9.0, verify) == pytest.approx(expected)


def test_a_low_confidence_draft_ends_the_round():
    rows = [(1, 0.95, 1), (1, 0.2, 1), (1, 0.95, 1), (1, 0.95, 1)]
    # K = 4 drafts 2 (the second, below 0.3, stops it) and writes 3 tokens; then the last token, drafted alone
    assert replay_ms(rows, fixed_k(4), 9.0, verify) == pytest.approx((2 * 9 + 34.0) + (1 * 9 + 32.0))


def test_speedup_is_target_alone_over_the_replay():
    rows = [RIGHT] * 8
    assert speedup([rows], fixed_k(7), 9.0, verify) == pytest.approx(8 * 30.0 / (7 * 9 + 44.0))
    assert speedup([rows], fixed_k(0), 9.0, verify) == pytest.approx(1.0)
    # a dearer draft step lowers it; a wrong draft model lowers it below 1
    assert speedup([rows], fixed_k(7), 12.0, verify) < speedup([rows], fixed_k(7), 9.0, verify)
    assert speedup([[WRONG] * 8], fixed_k(3), 9.0, verify) < 1.0


def test_each_completion_is_replayed_on_its_own():
    # two completions of 4: a round each (4 drafts, up to the completion's last token, and a 5-wide verify); run
    # together, the first round of 7 drafts would have drafted across the first completion's end
    assert speedup([[RIGHT] * 4, [RIGHT] * 4], fixed_k(7), 9.0, verify) == pytest.approx(
        8 * 30.0 / (2 * (4 * 9 + 38.0)))
    assert speedup([[RIGHT] * 8], fixed_k(7), 9.0, verify) > speedup([[RIGHT] * 4] * 2, fixed_k(7), 9.0, verify)
