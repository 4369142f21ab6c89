"""Every page opens where Triton has no wheels (macOS, Windows): requirements.txt installs Triton
on Linux only, so the sizer, fragmentation and planner pages must not import it, and the kernel
page says what is unavailable and shows the shipped results that need no kernel."""

import subprocess
import sys
import textwrap

from support.paths import ROOT

# A child interpreter where importing triton fails as it does without the package.
SCRIPT = textwrap.dedent("""
    import importlib.abc, sys
    class NoTriton(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "triton" or name.startswith("triton."):
                raise ModuleNotFoundError(f"No module named {name!r}")
    sys.meta_path.insert(0, NoTriton())
    sys.path[:0] = [sys.argv[1]]
    from streamlit.testing.v1 import AppTest
    for page in ("1_sizer.py", "2_fragmentation.py", "4_planner.py"):
        at = AppTest.from_file(f"{sys.argv[1]}/pages/{page}", default_timeout=120).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.title, page
        assert "triton" not in sys.modules, page
    at = AppTest.from_file(f"{sys.argv[1]}/pages/3_kernels.py", default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    warning = " ".join(w.value for w in at.warning)
    assert "Triton is not installed" in warning and "the correctness check" in warning, warning
    targets = at.dataframe[0].value.set_index("Target")
    assert "decode_large_tbps" in targets.index and set(targets["Met"]) <= {"yes", "no"}
    assert any("Which page size" in h.value for h in at.subheader)
    assert "triton" not in sys.modules
    print("ok")
""")


def test_every_page_runs_without_triton():
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
