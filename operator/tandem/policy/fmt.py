"""Numbers for people, in decision reasons. Pure."""

from __future__ import annotations


def human(value: float) -> str:
    """``1310000 → '1.31M'``, ``28000 → '28k'``, ``3.5 → '3.5'``.

    >>> human(1_310_000), human(28_000), human(3.5), human(0)
    ('1.31M', '28k', '3.5', '0')
    """
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"
