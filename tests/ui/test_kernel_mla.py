"""ui.kernel_mla: the newest readable MLA file is the one shown."""

import shutil

from kernels.bench.shipped import RESULTS_DIR
from ui.kernel_mla import newest_mla

SHIPPED = RESULTS_DIR / "mla" / "mla-h200-2026-12-04.json"


def test_newest_mla_skips_a_newer_file_it_cannot_read(tmp_path):
    shutil.copy(SHIPPED, tmp_path / "mla-h200-2026-12-04.json")
    (tmp_path / "mla-h200-2026-12-05.json").write_text('{"schema": "kv-cache-explorer.kernels.bench.mla"}')
    report, name = newest_mla(tmp_path)
    assert name == "mla-h200-2026-12-04.json"
    assert len(report.results) == 24 and report.provenance.commit == "a5af746"


def test_newest_mla_is_none_without_a_readable_file(tmp_path):
    (tmp_path / "mla-h200-2026-12-05.json").write_text("not json")
    assert newest_mla(tmp_path) is None
    assert newest_mla(tmp_path / "absent") is None
