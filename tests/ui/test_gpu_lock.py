"""The GPU gate: one run at a time across threads (browser sessions), cancel, OOM as an outcome."""

import threading

import pytest

from ui.gpu_lock import GpuBusy, GpuGate, RunCancelled, run_guarded


def test_second_session_waits_and_sees_who_holds_the_gpu():
    gate = GpuGate()
    seen = []
    inside, release = threading.Event(), threading.Event()

    def first():
        with gate.hold("decode B=1 L=32768"):
            inside.set()
            release.wait(10)

    t = threading.Thread(target=first)
    t.start()
    inside.wait(5)

    def on_wait(status):
        seen.append(status)
        release.set()  # the first run finishes once the second has been told to wait

    with gate.hold("prefill N=4096", poll_s=0.05, on_wait=on_wait):
        assert gate.status().owner == "prefill N=4096"
    t.join()
    assert seen and seen[0].busy and seen[0].owner == "decode B=1 L=32768"
    assert "Waiting for the GPU" in seen[0].message
    assert not gate.status().busy


def test_gives_up_after_wait_s_instead_of_hanging():
    gate = GpuGate()
    with gate.hold("long run"):
        errors = []

        def other():
            try:
                with gate.hold("impatient", wait_s=0.2, poll_s=0.05):
                    pass
            except GpuBusy as exc:
                errors.append(str(exc))

        t = threading.Thread(target=other)
        t.start()
        t.join(5)
    assert errors and "long run" in errors[0]


def test_cancel_reaches_the_running_sweep_and_is_cleared_for_the_next():
    gate = GpuGate()
    assert gate.request_cancel() is False  # nothing runs
    with gate.hold("sweep") as handle:
        handle.check()  # not cancelled yet
        assert gate.request_cancel() is True
        with pytest.raises(RunCancelled):
            handle.check()
    with gate.hold("next") as handle:
        handle.check()  # the earlier cancel does not leak into this run


def test_lock_released_when_the_run_raises():
    gate = GpuGate()
    with pytest.raises(ValueError):
        with gate.hold("broken"):
            raise ValueError("boom")
    assert not gate.status().busy


def test_run_guarded_outcomes():
    assert run_guarded(lambda: 3).value == 3

    def oom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    out = run_guarded(oom)
    assert out.status == "oom" and "memory released" in out.message

    def cancel():
        raise RunCancelled("run cancelled")

    assert run_guarded(cancel).status == "cancelled"
    assert run_guarded(lambda: 1 / 0).status == "error"

    def stop():
        raise KeyboardInterrupt  # BaseException: Streamlit's stop/rerun behave the same

    with pytest.raises(KeyboardInterrupt):
        run_guarded(stop)
