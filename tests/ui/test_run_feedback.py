"""Long runs across sessions: the simulation gate says who a queued run waits for, the result
store keeps finished runs, and RunFeedback stops a run between steps, keeping the last result."""

import threading

import pytest
from streamlit.testing.v1 import AppTest

from support.gates import cancelled_by_another_session, held_by_another_session
from ui.gpu_lock import GpuGate
from ui.run_feedback import GATE_HOOK, results_key, stale_css, sticky_css
from ui.run_queue import ResultStore, queued_message


def test_second_session_is_told_it_is_queued_and_since_when():
    now = [1000.0]
    gate = GpuGate(clock=lambda: now[0])  # the start times read this clock; the waits are real
    inside, release = threading.Event(), threading.Event()

    def first_session():
        with gate.hold("simulating over time"):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=first_session)
    thread.start()
    assert inside.wait(5)
    now[0] += 12.4  # the first run started 12.4 s before the second asks
    told = []

    def on_wait(status):
        told.append(queued_message(status))
        release.set()  # the first run ends once the second has been told it waits

    with gate.hold("comparing the four allocators", poll_s=0.02, on_wait=on_wait):
        assert gate.status().owner == "comparing the four allocators"
    thread.join(5)
    assert told[0] == ("Queued behind another session's run, started 12 s ago (simulating over time); "
                       "this run starts when it ends.")
    assert not gate.status().busy


def test_store_keeps_the_most_recently_used_runs():
    store = ResultStore(entries=2)
    store.put("a", 1)
    store.put("b", 2)
    assert store.get("a") == 1  # "a" is now the more recent of the two
    store.put("c", 3)
    assert (store.get("a"), store.get("b"), store.get("c"), len(store)) == (1, None, 3, 2)
    with pytest.raises(ValueError, match="value"):
        store.put("d", None)


@pytest.mark.parametrize("entries", [0, -1, 2.5, True, "8"])
def test_store_refuses_a_size_that_is_not_a_positive_integer(entries):
    with pytest.raises(ValueError, match="entries"):
        ResultStore(entries=entries)


def test_styles_name_the_tab_containers():
    main, compare = (f".st-key-{results_key('timeline', part)}" for part in ("main", "compare"))
    assert stale_css("timeline", ("main", "compare")).startswith(f"<style>{main}, {compare} {{ opacity: 0.45")
    assert "position: sticky" in sticky_css("prefix", "#ffffff") and "st-key-run-feedback-prefix" in sticky_css(
        "prefix", "#ffffff")


def _script(store, steps, queue=True):
    """A tab with one run of ``steps`` progress steps of 3 ms; its value is the setting "n" times 10."""
    import time

    import streamlit as st

    from ui.run_feedback import RunFeedback

    feedback = RunFeedback("demo", store=store)
    n = st.number_input("n", 1, 100, key="n")

    def compute(progress):
        for step in range(steps):
            time.sleep(0.003)  # a step of work, which also lets other threads in
            progress(step / steps)
        return n * 10

    run = feedback.run(("demo", n), "counting", compute, queue=queue)
    if run.value is not None:
        with feedback.results():
            st.metric("value", run.value)


def _app(gate, steps=100, queue=True):
    at = AppTest.from_function(_script, args=(ResultStore(), steps, queue), default_timeout=30)
    at.session_state[GATE_HOOK] = gate
    return at


def test_a_cancel_between_steps_keeps_the_last_result():
    gate = GpuGate()
    at = _app(gate).run()
    assert [m.value for m in at.metric] == ["10"] and not at.warning
    at.session_state["n"] = 2
    with cancelled_by_another_session(gate):
        at.run()
    # The run stopped at a progress call, before finishing: the figure is the last finished one.
    assert [m.value for m in at.metric] == ["10"]
    assert "Run cancelled" in at.warning[0].value and "last finished run's" in at.warning[0].value
    assert not gate.status().busy
    at.run()  # the same settings stay cancelled: not started again behind the user's back
    assert [m.value for m in at.metric] == ["10"] and "Run cancelled" in at.warning[0].value
    at.button(key="run.demo.main.again").click().run()
    assert [m.value for m in at.metric] == ["20"] and not at.warning


def test_a_run_queued_behind_another_session_says_how_long_it_waited():
    gate = GpuGate()
    holding = threading.Event()

    def other_session():
        with gate.hold("simulating over time"):
            holding.set()
            threading.Event().wait(1.2)

    thread = threading.Thread(target=other_session)
    thread.start()
    assert holding.wait(5)
    at = _app(gate, steps=1).run()
    thread.join(5)
    assert [m.value for m in at.metric] == ["10"]
    waited = next(c.value for c in at.caption if "queued" in c.value)
    seconds = float(waited.split("queued ")[1].split(" s")[0])
    assert 0.5 <= seconds <= 5 and "behind another session's run" in waited


def test_a_run_that_skips_the_queue_does_not_wait_for_another_sessions_run():
    gate = GpuGate()
    with held_by_another_session(gate):
        at = _app(gate, steps=1, queue=False).run(timeout=5)
        # Done while the other run still holds the gate: nothing waited, nothing says it queued.
        assert gate.status().busy
    assert [m.value for m in at.metric] == ["10"] and not at.exception
    assert not any("queued" in c.value.lower() for c in at.caption)
