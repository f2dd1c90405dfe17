"""A lookup draft's match length (Draft.matched) and the acceptance the auto policy keeps per match length: a long
match is cut to what its own, higher acceptance pays for, a 2-token match to what its lower one does."""
import numpy as np
import pytest
from test_engine_policy import ALL, FLAT, ZEN4_VNNI, FrozenCosts

from engine.decode.drafters import Draft, LookupDrafter, matched_length
from engine.decode.policy import GainPolicy, Shadow, match_bucket
from engine.decode.suffix_index import SuffixIndex

# (name, context as a string of one-letter tokens, expected match length). The lookup matches the last 4 tokens at
# most (n from 4 down to 2); the match length counts back from there while the text before both agrees.
MATCH_CASES = [
    ("4 tokens at the text's start", "abcdXabcd", 4),
    ("agrees 2 more tokens back", "pqabcdXpqabcd", 6),
    ("differs right before the match", "zabcdXyabcd", 4),
    ("a 2-token match", "abXYab", 2),
    ("the latest occurrence counts", "pqabcdXzabcdYpqabcd", 4),
    ("capped", "ab" * 40, 32),
]


def as_tokens(text: str) -> list[int]:
    return [ord(c) for c in text]


@pytest.mark.parametrize("case", MATCH_CASES, ids=[c[0] for c in MATCH_CASES])
def test_a_lookup_draft_says_how_long_its_match_is(case):
    _, text, expected = case
    draft = LookupDrafter(max_ngram=4, min_ngram=2).propose(as_tokens(text), 4, lambda: False)
    assert draft.tokens and draft.source == "prompt"
    assert draft.matched == expected


def test_no_match_no_length():
    draft = LookupDrafter(max_ngram=4, min_ngram=2).propose(as_tokens("abcdefgh"), 4, lambda: False)
    assert draft.tokens == [] and draft.matched == 0


def test_match_length_counts_back_from_the_match_it_is_given():
    tokens = np.asarray(as_tokens("xyabcdQxyabcd"))
    assert matched_length(tokens, 2, 4) == 6 and matched_length(tokens, 2, 4, cap=5) == 5


def test_an_index_hit_carries_its_match_length():
    index = SuffixIndex()
    index.add("other.py", as_tokens("zzqrstuvwxyz"))
    draft = LookupDrafter(max_ngram=4, min_ngram=4, index=index).propose(as_tokens("abqrstuv"), 3, lambda: False)
    assert draft.source == "workspace" and draft.tokens == as_tokens("wxy")
    assert draft.matched == 6  # "qrstuv": the index's match, longer than any in the prompt


@pytest.mark.parametrize("matched,bucket", [(0, None), (2, "match2"), (3, "match2"), (4, "match4"), (7, "match4"),
                                            (8, "match8"), (15, "match8"), (16, "match16"), (32, "match16")])
def test_match_buckets(matched, bucket):
    assert match_bucket(matched) == bucket


def lookup_draft(n: int, matched: int, source: str = "prompt") -> Draft:
    return Draft(tokens=[5] * n, probs=[None] * n, source=source, matched=matched)


def test_review_cuts_a_lookup_draft_by_its_match_length():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(ZEN4_VNNI), draft_ms=13.7), ALL)
    policy.trials["prompt"] = [6.0, 10.0]  # all prompt lookups together: 0.6
    policy.trials["match2"] = [2.0, 10.0]
    policy.trials["match16"] = [9.8, 10.0]
    by_source = len(policy.review(lookup_draft(8, 0)).tokens)
    short = len(policy.review(lookup_draft(8, 2)).tokens)
    long = len(policy.review(lookup_draft(8, 20)).tokens)
    assert (short, by_source, long) == (1, 3, 8)


def test_verified_and_shadow_lookups_are_counted_by_match_length():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(FLAT)), ALL)
    for _ in range(20):
        policy.report("lookup", lookup_draft(4, 20), 4, 0.1)  # long matches: right
        policy.report("lookup", lookup_draft(4, 2), 0, 0.1)  # 2-token matches: wrong
    assert policy.alpha("match16") > 0.95 and policy.alpha("match2") < 0.05
    assert 0.6 < policy.alpha("prompt") < 0.9 and policy.alpha("match4") == policy.alpha("match8") == 0.8  # seeds
    policy.shadow = Shadow.of([1, 2, 3], [7, 7], "prompt", matched=9)
    policy._score_shadow([1, 2, 3, 7, 7])
    assert policy.shadow_scored == 1
    assert policy.trials["match8"] == pytest.approx([0.9 * 1.6 + 2, 0.9 * 2 + 2])  # the seed, decayed, and these 2


def test_a_lookup_is_asked_for_the_longest_draft_the_pass_allows():
    """Proposing costs a lookup nothing; `review` cuts by the match it found, so a long match is not cut to the K
    that all lookups' acceptance together pays for."""
    policy = GainPolicy(FrozenCosts(verify_ms=dict(ZEN4_VNNI), draft_ms=13.7), ("none", "lookup"), max_k=8)
    policy.trials["lookup"] = policy.trials["prompt"] = [6.0, 10.0]
    drafter, k = policy.choose([1, 2, 3], 1000)
    assert drafter == "lookup" and k == 8
    assert policy.choose([1, 2, 3], 5) == ("lookup", 5)  # within what the request has left
