"""The shipped results as the pages show them: every file a harness result, the run's command as
a reader types it, and a note when this machine's torch or triton differs from the run's."""

from __future__ import annotations

from kernels.bench.shipped import RESULTS_DIR, find_shipped_results, provenance_lines, shown_command


def test_every_shipped_file_is_a_harness_result():
    # Tuning calls live under results/tuning/, so the page has no "not harness results" box.
    shipped = find_shipped_results(RESULTS_DIR)
    assert shipped.rejected == ()
    assert shipped.newest is not None


def test_the_command_drops_the_run_machines_paths():
    recorded = "/opt/torch/.venv/bin/python3 -m kernels.bench --json /root/out/r/h200-2026-12-01.json --rep-ms 40"
    assert shown_command(recorded) == "python -m kernels.bench --json h200-2026-12-01.json --rep-ms 40"
    assert shown_command("python3 -m kernels.bench --quick") == "python -m kernels.bench --quick"
    assert shown_command("2 run(s): a; b") == "2 run(s): a; b"  # a merged run's label stays as recorded
    assert shown_command('python -m x "unbalanced') == 'python -m x "unbalanced'


def test_installed_versions_are_named_only_where_they_differ():
    report = find_shipped_results(RESULTS_DIR).newest.report
    ran = {"torch": report.provenance.torch, "triton": report.provenance.triton}
    same = provenance_lines(report, "f.json", {"torch": ran["torch"].split("+")[0] + "+cpu", "triton": ran["triton"]})
    assert not any(line.startswith("Installed here") for line in same)  # a local build tag is no difference
    other = provenance_lines(report, "f.json", {"torch": "9.9.9", "triton": None})
    assert other[-1] == (f"Installed here: torch 9.9.9, triton not installed — these results ran on "
                         f"torch {ran['torch']}, triton {ran['triton']}")
    assert not any("/opt/" in line or "/root/" in line for line in other)
