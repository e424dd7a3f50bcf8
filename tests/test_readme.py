"""The README's two opening commands, and CI running the second one."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _opening_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)
    return [b.strip() for b in blocks[:2]]


def test_readme_opens_with_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = text.index("```bash")
    # nothing but the title comes before the commands
    assert text[:first_block].strip().startswith("#")
    assert len(text[:first_block].strip().splitlines()) == 1
    cmds = _opening_commands()
    assert len(cmds) == 2 and all("\n" not in c for c in cmds)
    assert "python -m tvm_cim run" in cmds[0] and "--report" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _opening_commands()[1] in ci.splitlines()
