"""Refusals on the pages name the widget the user typed into, not the library's field."""

from inputs.errors import InputError
from sizing import fields as F
from ui.field_labels import PLANNER_LABELS, page_message, widget_label


def test_a_bound_refusal_reads_with_the_widget_label():
    try:
        F.CONTEXT.parse(0)
    except InputError as exc:
        # The bound writes "must be a whole number from 1 to ..., got 0" for the field "context".
        assert page_message(exc) == "**Context (tokens)** " + exc.message
        assert page_message(exc, PLANNER_LABELS).startswith("**Maximum context (tokens)** must be")
    else:  # pragma: no cover - the bound must refuse 0
        raise AssertionError("context 0 was accepted")


def test_other_messages_are_led_by_the_label_and_unknown_fields_by_themselves():
    assert page_message(InputError("model_id", "org/x is gated")) == "**Hugging Face model id**: org/x is gated"
    assert widget_label("rope_theta") == "rope_theta"  # a config.json key: no widget sets it


def test_every_sizer_field_with_a_widget_has_its_label():
    # The sizer's bounded fields (sizing.fields) that a sizer widget sets.
    for bound in (F.CONTEXT, F.USERS, F.N_GPUS, F.USABLE_FRACTION, F.LAYERS, F.HEAD_DIM, F.Q_HEADS, F.KV_HEADS,
                  F.PARAMS_BILLIONS, F.SLIDING_WINDOW):
        assert widget_label(bound.field) != bound.field, bound.field
