"""Two report-scale shortcuts that must read exactly as what they replace: a run's measured
iterations as two arrays, and the distinct values of an identity field."""

from __future__ import annotations

from dltop.results import bootstrap
from dltop.results.measured import NONE, Measured


def test_measured_reads_as_its_pairs() -> None:
    pairs = [(0.1, 8), (0.25, 8), (0.2, 16)]
    m = Measured.of(pairs)
    assert list(m) == pairs and len(m) == 3 and m[1] == (0.25, 8) and m[-1] == (0.2, 16)
    assert m == pairs and m == tuple(pairs) and m == Measured.of(pairs)
    assert m[1:] == pairs[1:] and isinstance(m[1:], Measured)
    assert hash(m) == hash(Measured.of(pairs)) and m != Measured.of(pairs[:2])
    assert not NONE and len(NONE) == 0
    assert [n for _, n in m] == [8, 8, 16] and all(isinstance(n, int) for _, n in m)
    # the statistics see the same numbers either way
    runs = [[(0.1 + 0.01 * i, 8) for i in range(9)], [(0.2 + 0.01 * i, 8) for i in range(7)]]
    assert bootstrap.median_ci([Measured.of(r) for r in runs]) == bootstrap.median_ci(runs)


def test_distinct_values_match_their_canonical_keys() -> None:
    from dltop.results import identity, idread

    cases = [[1, 1.0, True], [1, 2, 2], ["a", None, "a"], [(1,), (True,)], [[1], [1.0]],
             [{"a": 1}, {"a": 1}], [0.1, 0.1], [None, None], [False, 0]]
    for values in cases:
        idents = [{"x": v, idread.INTERPRETER: v} for v in values]
        for name in ("x", idread.INTERPRETER):
            want = {identity._canon(i.get(name)) for i in idents
                    if not (name == idread.INTERPRETER and i.get(name) is None)}
            assert identity._distinct(idents, name) == want, (values, name)
