"""The README's promises: exactly two set-up commands, and CI runs the test one verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup_commands() -> list[str]:
    """Commands in the README's 'Set up' section: the fenced ```bash blocks there."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_readme_gives_exactly_two_setup_commands():
    commands = _setup_commands()
    assert len(commands) == 2, commands
    app_command, test_command = commands
    assert app_command.endswith("streamlit run app.py")
    assert "apt-get install" in test_command and "chromium" in test_command
    assert "pytest" in test_command


def test_ci_runs_the_readme_test_command():
    ci_script = (ROOT / ".ci" / "run").read_text()
    match = re.search(r"^TEST_COMMAND='(.*)'$", ci_script, flags=re.M)
    assert match, "TEST_COMMAND not found in .ci/run"
    assert match.group(1) == _setup_commands()[1]


def test_requirements_pin_triton_with_torch():
    lines = [line for line in (ROOT / "requirements.txt").read_text().splitlines()
             if "==" in line and not line.startswith("#")]
    pins = dict(line.split(";")[0].strip().split("==") for line in lines)  # environment markers aside
    # Triton has wheels for Linux only: elsewhere pip must skip it, not fail to resolve.
    assert next(line for line in lines if line.startswith("triton")).endswith('; sys_platform == "linux"')
    # torch 2.13.0's CUDA wheel on PyPI requires triton 3.7.1 exactly: a mismatched pin
    # would make `pip install -r requirements.txt` unresolvable for real users.
    assert pins["torch"] == "2.13.0" and pins["triton"] == "3.7.1"


def test_the_readme_cli_examples_run_and_print_strict_json():
    """Every scripting example except the GPU harness runs from a fresh clone and prints JSON."""
    import json
    import shlex
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Scripting", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    # The kernel commands and the layer-mix timing need GPUs (one, or two for kernels.multi_gpu);
    # every other example runs here.
    needs_gpu = ("python -m kernels.", "python -m planner layer-mix")
    examples = [line for line in block.strip().splitlines() if not line.startswith(needs_gpu)]
    assert len(examples) == 6
    for line in examples:
        argv = shlex.split(line)
        assert argv[:2] == ["python", "-m"]
        done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (line, done.stderr[-500:])
        json.loads(done.stdout, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(name)))
