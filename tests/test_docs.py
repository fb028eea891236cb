"""Every fenced code block of README.md and docs/*.md runs as a reader would run it.

A block's language tag says what happens to it:

- ``python``: the block runs as written, as a script of its own (``python -c``, so a fresh
  namespace), and must exit with status 0.  Asserts inside the block are its checks.
- ``console`` / ``sh``: each command line runs in ``bash``, after the rewrites of ``REWRITES``
  (a long run made short, an install dropped), and must exit with status 0 and print what its
  entry in ``CHECKS`` expects.  A command without an entry there fails the test: add one.
- ``text``: not run.  ``NOT_RUN`` says why (a Ray cluster, a CUDA GPU, a placeholder the
  reader fills in); there may be at most ``MAX_NOT_RUN`` of them in all the pages.

Any other tag (or none) fails the test, so that no code block goes untested.

The blocks of all pages run in one temporary folder, README.md first, as a reader who follows
the README and then the docs would run them: a docs page may use what the README's blocks
left there (``tuning.db`` of the main job, the exported ``resnet18_artifact``).  Running one
docs page alone (``-k``) runs the README's blocks first.  The test command of the README
(``python -m pytest ...``) runs at the repository root, as the README says.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

README_MAX_LINES = 120
BLOCK_SECONDS = 240
RUN = {"python", "console", "sh"}
NOT_RUN = {"text": "needs what a test machine lacks (a Ray cluster, a CUDA GPU, hours of "
                   "benchmarking) or holds a placeholder the reader fills in"}
MAX_NOT_RUN = 6

# The set-up commands exactly as CI runs them (.ci/run runs the second one's pytest part).
MAIN_JOB = ('pip install -e ".[test]" && tune-model resnet18 --db tuning.db --trials 300 '
            '--report report/')
TEST_COMMAND = 'pip install -e ".[test]" && python -m pytest -q -n 2 --dist loadfile'

# Zoo models made small on a tune-model line (the tuning is what is tested, not the size).
SMALL_MODEL = {"resnet18": "image_size=32", "resnet50": "image_size=32",
               "mobilenet_v2": "image_size=32", "bert_base_layer": "seq=16"}


def _drop_install(line: str) -> str:
    # The package is installed already (editable), and a test must not reach the network.
    return re.sub(r'^pip install -e "\.\[test\]" && ', "", line)


def _few_trials(line: str) -> str:
    # A budget of hundreds of trials takes minutes; four show the same run end to end.
    return re.sub(r"--trials \d+", "--trials 4", line)


def _small_model(line: str) -> str:
    match = re.match(r"tune-model (\w+)\b", line)
    if match is None or match.group(1) not in SMALL_MODEL:
        return line
    return f"{line} --option {SMALL_MODEL[match.group(1)]}"


def _collect_only(line: str) -> str:
    # The suite cannot run inside itself (and takes 20 minutes): collecting it checks that the
    # command line, its plugins (pytest-xdist) and every test module load.
    if not line.startswith("python -m pytest"):
        return line
    return f"{line} --collect-only -p no:cacheprovider"


REWRITES = (
    ('drop `pip install -e ".[test]" && ` (installed already; no network in a test)',
     _drop_install),
    ("`--trials N` becomes `--trials 4`", _few_trials),
    ("a zoo model on a tune-model line gets `--option image_size=32` (BERT: `seq=16`)",
     _small_model),
    ("`python -m pytest ...` gets `--collect-only -p no:cacheprovider`", _collect_only),
)

# (command pattern, what its output must hold).  The first matching entry applies.
CHECKS = (
    (r"^tune-model report\b", r"coverage: "),
    (r"^tune-model .*--report report/", r"report written to report/"),
    (r"^tune-model ", r"trials: \d+ of a budget of \d+"),
    (r"^python -m pytest\b", r"\d+(/\d+)? tests collected"),
    (r"^python -m records export\b", r"exported \d+ records"),
    (r"^python -m records info\b", r"\d+ workloads, \d+ records"),
    (r"^python -m records import\b", r"imported \d+ new records"),
    (r"^python -m cost_models pretrain\b", r'"trained": true'),
    (r"^python -m cost_models evaluate\b", r'"accuracy": [0-9.]+'),
    (r"^python -m autotune.measure.cluster resources\b", r'"autotune-measure-llvm-[0-9a-f]+"'),
    (r"^python -m autotune.frontends.check\b", r"\bConv\b"),
)


@dataclass(frozen=True)
class Block:
    page: str      # path relative to the repository root
    line: int      # line of the opening fence, counted from 1
    tag: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order (fences at the start of a line)."""
    blocks, tag, start, body = [], None, 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if tag is None:
            match = re.match(r"^```(\S*)\s*$", line)
            if match:
                tag, start, body = match.group(1), number, []
        elif line.startswith("```"):
            blocks.append(Block(str(path.relative_to(ROOT)), start, tag, "\n".join(body)))
            tag = None
        else:
            body.append(line)
    assert tag is None, f"{path.name}:{start}: a fenced block is never closed"
    return blocks


def docs_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def commands(block: Block) -> list[str]:
    """The command lines of a shell block: a leading ``$ `` dropped, comments and blank lines
    skipped, a trailing backslash joining the next line."""
    out, pending = [], ""
    for raw in block.text.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out


def rewrite(command: str) -> str:
    """The command as the test runs it: the comment dropped, then every rule of REWRITES."""
    command = re.sub(r"\s+#.*$", "", command).strip()
    for _, rule in REWRITES:
        command = rule(command)
    return command


def _env(folder: Path) -> dict[str, str]:
    # This interpreter's scripts (python, tune-model) first on PATH.  AUTOTUNE_QUIET_WAIT=0
    # comes from conftest.py: no waiting for a quiet host in the suite.  The home folder is
    # one inside the reader's folder: what the blocks cache there (the simulated
    # accelerator's compiled model, ~/.cache/autotune/accel) goes with it, and the suite
    # leaves the real home folder alone (tests/test_home_folder.py).
    env = dict(os.environ)
    home = folder / ".home"
    home.mkdir(exist_ok=True)
    env["HOME"] = str(home)
    # A block runs as a reader's command, not as part of this pytest run (an xdist worker's
    # variables would otherwise reach the README's own pytest command).
    for name in [n for n in env if n.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))]:
        del env[name]
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_block(block: Block, folder: Path) -> None:
    """Run one block in ``folder``; fail the test, naming the page and line, if it fails."""
    if block.tag == "python":
        proc = subprocess.run([sys.executable, "-c", block.text], cwd=folder,
                              env=_env(folder), capture_output=True, text=True,
                              timeout=BLOCK_SECONDS)
        if proc.returncode != 0:
            pytest.fail(f"{block.where}: the python block exited with {proc.returncode}:\n"
                        f"{_tail(proc.stdout + proc.stderr)}")
        return
    for command in commands(block):
        line = rewrite(command)
        checks = [want for pattern, want in CHECKS if re.search(pattern, line)]
        if not checks:
            pytest.fail(f"{block.where}: no output check for {line!r}: add one to CHECKS")
        cwd = ROOT if line.startswith("python -m pytest") else folder
        proc = subprocess.run(["bash", "-c", line], cwd=cwd, env=_env(folder),
                              capture_output=True, text=True, timeout=BLOCK_SECONDS)
        output = proc.stdout + proc.stderr
        if proc.returncode != 0:
            pytest.fail(f"{block.where}: {line!r} exited with {proc.returncode}:\n"
                        f"{_tail(output)}")
        if not re.search(checks[0], output):
            pytest.fail(f"{block.where}: the output of {line!r} lacks {checks[0]!r}:\n"
                        f"{_tail(output)}")
        assert "Traceback (most recent call last)" not in output, f"{block.where}: {line!r}"


def run_page(path: Path, folder: Path) -> None:
    for block in blocks_of(path):
        if block.tag in RUN:
            run_block(block, folder)
        else:
            assert block.tag in NOT_RUN, (f"{block.page}:{block.line}: fence tag "
                                          f"{block.tag!r} is neither run ({sorted(RUN)}) nor "
                                          f"named as not run ({sorted(NOT_RUN)})")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The reader's folder, where the README's blocks have run."""
    path = tmp_path_factory.mktemp("docs")
    run_page(README, path)
    return path


def test_readme_blocks_run(folder):
    # The fixture ran them; what they left behind is what the README says they make.
    assert (folder / "tuning.db").exists()
    assert (folder / "report" / "curve.png").exists()
    assert (folder / "resnet18_artifact" / "loader.py").exists()


@pytest.mark.parametrize("page", [p.name for p in docs_pages()])
def test_docs_page_blocks_run(page, folder):
    run_page(DOCS / page, folder)


def test_every_block_has_a_known_tag_and_few_are_not_run():
    pages = [README] + docs_pages()
    blocks = [b for p in pages for b in blocks_of(p)]
    unknown = [f"{b.where} ({b.tag or 'no tag'})" for b in blocks
               if b.tag not in RUN and b.tag not in NOT_RUN]
    assert not unknown, f"fenced blocks with an unknown tag: {unknown}"
    not_run = [b.where for b in blocks if b.tag in NOT_RUN]
    assert len(not_run) <= MAX_NOT_RUN, f"too many blocks are not run: {not_run}"
    # An indented code block (four spaces after a blank line) would escape this test.
    for path in pages:
        inside, previous = False, ""
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                inside = not inside
            elif not inside and not previous.strip() and re.match(r"^( {4}|\t)\S", line):
                pytest.fail(f"{path.name}:{number}: an indented code block; fence it instead")
            previous = line


def test_readme_is_short_and_keeps_the_set_up_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    lines = [rewrite(c) for b in blocks_of(README) if b.tag in ("sh", "console")
             for c in commands(b)]
    assert any(line.startswith("tune-model resnet18") for line in lines)
    # Byte for byte: CI (.ci/run) runs the test command as the README gives it.
    assert any(line.startswith(MAIN_JOB) for line in text.splitlines()), MAIN_JOB
    assert any(line.startswith(TEST_COMMAND) for line in text.splitlines()), TEST_COMMAND
    ci = (ROOT / ".ci" / "run").read_text()
    assert TEST_COMMAND.split(" && ")[1] in ci


def test_links_point_at_files_that_exist():
    for path in [README] + docs_pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"^[a-z]+://|^#|^mailto:", target):
                continue
            resolved = (path.parent / target.split("#")[0]).resolve()
            assert resolved.exists(), f"{path.name}: link to {target} finds nothing"


def test_readme_links_every_docs_page():
    text = README.read_text()
    missing = [p.name for p in docs_pages() if f"docs/{p.name}" not in text]
    assert not missing, f"README.md links no docs page named {missing}"


def test_the_supported_onnx_operators_are_listed_as_the_importer_has_them():
    from autotune.frontends.onnx import SUPPORTED_OPS

    text = (DOCS / "models.md").read_text()
    match = re.search(r"<!-- onnx-ops -->\n(.*?)\n<!-- /onnx-ops -->", text, re.S)
    assert match, "docs/models.md: the operator list's markers are missing"
    listed = re.findall(r"`(\w+)`", match.group(1))
    assert listed == sorted(listed), "docs/models.md: list the operators in sorted order"
    assert set(listed) == set(SUPPORTED_OPS), (
        f"docs/models.md lists operators the importer lacks: "
        f"{sorted(set(listed) - set(SUPPORTED_OPS))}; and misses: "
        f"{sorted(set(SUPPORTED_OPS) - set(listed))}")


def test_a_failing_command_fails_the_page(tmp_path):
    # The runner itself: a block that exits non-zero, or lacks its output, is caught.
    page_block = Block("page.md", 1, "python", "raise SystemExit(3)")
    with pytest.raises(pytest.fail.Exception, match="exited with 3"):
        run_block(page_block, tmp_path)
    shell = Block("page.md", 1, "sh", "python -m records info missing.db")
    with pytest.raises(pytest.fail.Exception):
        run_block(shell, tmp_path)
    unchecked = Block("page.md", 1, "sh", "echo hello")
    with pytest.raises(pytest.fail.Exception, match="no output check"):
        run_block(unchecked, tmp_path)


def test_the_rewrites_do_what_they_say():
    assert rewrite(MAIN_JOB + "   # main job") == (
        "tune-model resnet18 --db tuning.db --trials 4 --report report/ "
        "--option image_size=32")
    assert rewrite(TEST_COMMAND) == (
        "python -m pytest -q -n 2 --dist loadfile --collect-only -p no:cacheprovider")
    assert rewrite("tune-model report --db tuning.db") == "tune-model report --db tuning.db"


def write_onnx_ops() -> None:
    """Rewrite the operator list of docs/models.md from the importer (``SUPPORTED_OPS``)."""
    from autotune.frontends.onnx import SUPPORTED_OPS

    lines, line = [], ""
    for op in sorted(SUPPORTED_OPS):
        item = f"`{op}`, "
        if len(line) + len(item) > 96:
            lines.append(line.rstrip())
            line = ""
        line += item
    lines.append(line.rstrip().rstrip(",") + ".")
    path = DOCS / "models.md"
    text = re.sub(r"(<!-- onnx-ops -->\n).*?(\n<!-- /onnx-ops -->)",
                  lambda m: m.group(1) + "\n".join(lines) + m.group(2), path.read_text(),
                  flags=re.S)
    path.write_text(text)


if __name__ == "__main__":
    # python tests/test_docs.py --write-onnx-ops: after the importer gains or loses operators.
    if sys.argv[1:] != ["--write-onnx-ops"]:
        sys.exit("usage: python tests/test_docs.py --write-onnx-ops")
    write_onnx_ops()
