"""The workspace suffix index against a brute-force scan of every document, on seeded random sequences."""
import random

import numpy as np
import pytest

from engine.decode.suffix_index import SEPARATOR, SuffixIndex, suffix_array


def brute_force(docs: dict, order: list, context, max_ngram, k, min_ngram):
    """docs: key -> (tokens, source); order: keys from least to most recently updated."""
    for length in range(min(max_ngram, len(context)), min_ngram - 1, -1):
        pattern = list(context[-length:])
        for key in reversed(order):  # most recent document first
            tokens, source = docs[key]
            for end in range(len(tokens) - 1, length - 1, -1):  # last occurrence first
                if tokens[end - length:end] == pattern and tokens[end] != SEPARATOR:
                    follow = tokens[end:end + k]
                    if SEPARATOR in follow:
                        follow = follow[:follow.index(SEPARATOR)]
                    return follow, length, key, source
    return None


@pytest.mark.parametrize("seed", range(6))
def test_suffix_array_sorts_every_suffix(seed):
    rng = random.Random(seed)
    tokens = [rng.randrange(4) for _ in range(rng.randrange(1, 300))]
    expected = sorted(range(len(tokens)), key=lambda i: tokens[i:])
    assert suffix_array(np.asarray(tokens)).tolist() == expected


@pytest.mark.parametrize("seed", range(8))
def test_queries_match_a_brute_force_scan_through_adds_replaces_and_removes(seed):
    rng = random.Random(seed)
    vocab = rng.choice([3, 5, 12])  # small vocabularies: many long and repeated matches
    index = SuffixIndex()
    docs, order = {}, []
    checked = hits = 0
    for step in range(40):
        action = rng.random()
        key = f"doc{rng.randrange(6)}"
        if action < 0.15 and key in docs:
            index.remove(key)
            del docs[key]
            order.remove(key)
        else:
            tokens = [rng.randrange(vocab) for _ in range(rng.randrange(0, 120))]
            source = "history" if key == "doc5" else "workspace"
            if source == "history":  # pieces joined by separators, as the engine stores completions
                for at in sorted(rng.sample(range(len(tokens) + 1), min(3, len(tokens) + 1)), reverse=True):
                    tokens.insert(at, SEPARATOR)
            index.add(key, tokens, source)
            docs[key] = (tokens, source)
            if key in order:
                order.remove(key)
            order.append(key)
        for _ in range(10):
            context = [rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
            max_ngram, k, min_ngram = rng.randrange(1, 9), rng.randrange(1, 10), rng.randrange(1, 4)
            expected = brute_force(docs, order, context, max_ngram, k, min_ngram)
            hit = index.query(context, max_ngram, k, min_ngram)
            got = None if hit is None else (hit.tokens, hit.length, hit.key, hit.source)
            assert got == expected, (step, context, max_ngram, k, min_ngram)
            checked += 1
            hits += expected is not None
    assert checked == 400 and 100 < hits < 400  # both outcomes exercised
    assert index.count("history") == ("doc5" in docs) and index.count("workspace") == len(docs) - ("doc5" in docs)


def test_prefers_the_longest_match_then_the_most_recent_document():
    index = SuffixIndex()
    index.add("old", [1, 2, 3, 4, 50, 51])
    index.add("new", [9, 3, 4, 60, 61])
    index.add("newest", [7, 7, 7])
    assert index.query([2, 3, 4], max_ngram=4, k=2).tokens == [50, 51]  # 3 tokens match in "old", 2 in "new"
    assert index.query([8, 3, 4], max_ngram=4, k=2).tokens == [60, 61]  # both match 2: the newer wins
    index.add("old", [1, 2, 3, 4, 50, 51])  # updating makes it the most recent
    assert index.query([8, 3, 4], max_ngram=4, k=2).tokens == [50, 51]
    assert index.query([2, 3, 4], max_ngram=1, k=2) is None  # min_ngram 2 > max_ngram 1
    assert index.query([5, 6], max_ngram=4, k=2) is None


def test_memory_is_capped_by_evicting_the_documents_updated_longest_ago():
    index = SuffixIndex(max_tokens=100)
    index.add("a", list(range(40)))
    index.add("b", list(range(40)))
    index.add("a", list(range(40)))  # now "b" is the oldest
    index.add("c", list(range(40)))
    assert "b" not in index and {"a", "c"} <= {k for k in ("a", "b", "c") if k in index}
    assert index.total_tokens <= 100
    index.add("huge", list(range(500)))
    assert len(index) == 1 and index.tokens("huge") == list(range(400, 500))
