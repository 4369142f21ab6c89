"""Every page's URL parameters, set to hostile and out-of-range values: the page renders without
an exception and says which parameter it ignored.

The parameters and their bounds come from the pages' own declarations
(:data:`ui.url_state.DECLARED`, filled when a page runs), so a new control is fuzzed without
being listed here.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.hostile import beyond
from support.apptest import assert_no_exception, open_page
from ui.model_picker import TextField
from ui.url_state import DECLARED, ChoiceField, FlagField, NumberField

PAGES = ("1_sizer.py", "2_fragmentation.py", "3_kernels.py", "4_planner.py")
NUMBER_JUNK = ("nan", "inf", "-inf", "1e308", "-1e308", "abc", "", "9" * 400)
CHOICE_JUNK = ("zzz", "", "1e308", "../../etc/passwd")
FLAG_JUNK = ("2", "yes", "")
# Refused by every text field (a Hub repo id, a layer layout): paths, URLs, oversize, bad syntax.
TEXT_JUNK = ("zzz(", "../../etc/passwd", "https://huggingface.co/a/b", "x" * 5000, "org/a b", "\u202e/x")
# Well-formed text that still reaches the page (a layout whose layers may disagree); no Hub id
# here, so that a random link never reaches the network.
TEXT_VALID = ("2 full + 2 sliding(64)", "5 sliding(1024) : 1 full", "1 full : 3 mamba", "4 mla")


def _fields_of(page: str):
    # The registry is process-wide: empty it so that only this page's declarations are read,
    # whichever pages other tests opened before, then put the others back.
    others = dict(DECLARED)
    DECLARED.clear()
    open_page(page)
    fields = [f for name in sorted(DECLARED) for f in DECLARED[name]]
    DECLARED.update({name: f for name, f in others.items() if name not in DECLARED})
    assert fields, f"{page} declares no URL parameters"
    return fields


def _junk(field) -> list[str]:
    if isinstance(field, NumberField):
        return [*NUMBER_JUNK, *beyond(field.bound)]
    if isinstance(field, ChoiceField):
        return list(CHOICE_JUNK)
    if isinstance(field, TextField):
        return list(TEXT_JUNK)
    assert isinstance(field, FlagField)
    return list(FLAG_JUNK)


def _page_text(at) -> str:
    parts = []
    for kind in ("caption", "warning", "info", "markdown", "error"):
        parts += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(parts)


FIELDS: dict[str, list] = {}


def _fields(page: str):
    if page not in FIELDS:
        FIELDS[page] = _fields_of(page)
    return FIELDS[page]


@pytest.mark.parametrize("page", PAGES)
def test_every_parameter_out_of_range_at_once_is_ignored_with_a_notice(page):
    fields = _fields(page)
    junk = {f.url_name: _junk(f) for f in fields}
    rounds = max(len(v) for v in junk.values())
    for k in range(rounds):
        query = {name: values[k % len(values)] for name, values in junk.items()}
        at = open_page(page, query=query, allow_exception=True)
        assert_no_exception(at)
        shown = _page_text(at)
        for name in query:
            assert f"`{name}`" in shown, (page, name, query[name])


@pytest.mark.parametrize("page", PAGES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_links_render(page, data):
    fields = _fields(page)
    chosen = data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=6, unique_by=lambda f: f.url_name))
    query = {}
    for field in chosen:
        if isinstance(field, NumberField):
            b = field.bound
            value = data.draw(st.one_of(
                st.sampled_from(_junk(field)),
                (st.integers(int(b.low), int(b.high)) if b.integer else st.floats(b.low, b.high)).map(str)))
        elif isinstance(field, ChoiceField):
            value = data.draw(st.one_of(st.sampled_from([str(o) for o in field.options]), st.sampled_from(CHOICE_JUNK)))
        elif isinstance(field, TextField):
            valid = TEXT_VALID if field.url_name == "lay" else ()
            value = data.draw(st.sampled_from([*valid, *TEXT_JUNK]))
        else:
            value = data.draw(st.sampled_from(["0", "1", *FLAG_JUNK]))
        query[field.url_name] = value
    at = open_page(page, query=query, allow_exception=True)
    assert_no_exception(at)
