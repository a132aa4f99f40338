"""grep (ripgrep and the pure-Python fallback give identical output), find and ls: caps, notices,
ignore rules, on the project's own tree, the letta-filesystem files and generated trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import REPO, shared_path
from ctxwin.tools import Workspace, find, find_rg, grep, ls
from ctxwin.tools.ignore import ignored, parse_rules, rebase_line

needs_rg = pytest.mark.skipif(find_rg() is None, reason="ripgrep is not installed (pip install 'ctxwin[grep]')")


def both(ws: Workspace, *args: object, **kwargs: object) -> str:
    """The grep output, after checking that both engines print exactly the same thing."""
    rg = grep(ws, *args, engine="rg", **kwargs)  # type: ignore[arg-type]
    py = grep(ws, *args, engine="python", **kwargs)  # type: ignore[arg-type]
    assert rg.details.get("engine") == "rg" or rg.is_error
    assert rg.text == py.text, f"rg and python differ for {args} {kwargs}:\n--- rg\n{rg.text}\n--- python\n{py.text}"
    assert rg.is_error == py.is_error
    return str(rg.text)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    files = {
        "README.md": "# Proj\nTODO: write docs\n",
        "src/app.py": "import os\n\ndef main():\n    # TODO: parse args\n    return os.getcwd()\n",
        "src/util.py": "def helper():\n    return 'TODO later'\n",
        "src/deep/nested/mod.py": "TODO = 1\nx = TODO\n",
        "build/out.js": "TODO generated\n",
        "logs/run.log": "TODO in a log\n",
        "logs/keep.log": "TODO kept by negation\n",
        "docs/guide.txt": "line\nTODO in docs\nmore\n",
        "docs/tmp/scratch.txt": "TODO scratch\n",
        ".hidden/config.txt": "TODO hidden but searched\n",
        "node_modules/pkg/index.js": "TODO in node_modules\n",
        ".git/HEAD": "TODO in git\n",
        ".env": "TODO=secret\n",
        "weird name-1.txt": "TODO: spaces and dashes\n",
        "crlf.txt": "TODO crlf\r\nnext\r\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / ".gitignore").write_text("build/\n*.log\n!keep.log\n/docs/tmp\n")
    (root / "docs" / ".gitignore").write_text("guide.txt\n")
    (root / "image.bin").write_bytes(b"TODO\x00\x01\x02binary")
    (root / "out-link.txt").symlink_to(tmp_path)
    os.mkfifo(root / "fifo")
    return root


@needs_rg
def test_engines_agree_on_a_generated_tree(tree: Path) -> None:
    ws = Workspace([tree])
    text = both(ws, "TODO")
    shown = {line.split(":")[0] for line in text.splitlines()}
    assert shown == {
        ".hidden/config.txt", "README.md", "crlf.txt", "logs/keep.log", "src/app.py", "src/deep/nested/mod.py",
        "src/util.py", "weird name-1.txt",
    }
    assert "src/deep/nested/mod.py:1:TODO = 1\nsrc/deep/nested/mod.py:2:x = TODO" in text
    assert "crlf.txt:1:TODO crlf\r" in text
    for variant in (
        {"context": 1}, {"context": 3}, {"glob": "*.py"}, {"glob": "src/**/*.py"}, {"ignore_case": True},
        {"limit": 3}, {"limit": 3, "context": 2}, {"path": "src"}, {"path": "docs"}, {"path": "src/app.py"},
        {"path": "logs"}, {"path": "build"}, {"literal": True},
    ):
        both(ws, "TODO", **variant)
    assert both(ws, "todo", ignore_case=True) == text
    # A glob picks paths .gitignore skips (ripgrep's rule: the glob wins), but never secrets or .git.
    assert both(ws, "TODO", glob="*.log") == "logs/keep.log:1:TODO kept by negation\nlogs/run.log:1:TODO in a log"
    assert both(ws, "TODO", glob=".env") == "No matches found"
    everything = both(ws, "TODO", glob="*")
    assert "build/out.js:1:" in everything and "docs/tmp/scratch.txt:1:" in everything
    assert ".env" not in everything and "node_modules" not in everything and ".git/" not in everything
    assert both(ws, "nothing-matches-this") == "No matches found"
    assert both(ws, "scratch", path="docs") == "No matches found"  # /docs/tmp from the root .gitignore applies below


@needs_rg
def test_engines_agree_on_the_project_tree() -> None:
    ws = Workspace([REPO])
    for pattern, kwargs in (
        ("def ", {"glob": "*.py"}),
        ("ToolError", {"path": "src", "context": 2}),
        ("import", {"limit": 250}),
        (r"class \w+\(", {}),
        ("TOOLS", {"path": "src/ctxwin/tools", "context": 1, "limit": 7}),
    ):
        out = both(ws, pattern, **kwargs)
        assert out != "No matches found"


def test_match_limit_and_notice(tmp_path: Path) -> None:
    (tmp_path / "many.txt").write_text("".join(f"match {n}\n" for n in range(250)))
    ws = Workspace([tmp_path])
    out = grep(ws, "match")
    body, notice = out.text.split("\n\n")
    assert len(body.splitlines()) == 100
    assert notice == "[100 matches limit reached. Use limit=200 for more, or refine pattern]"
    assert out.details["match_limit_reached"] is True
    exact = grep(ws, "match", limit=250)
    assert "\n\n[" not in exact.text and len(exact.text.splitlines()) == 250


def test_long_lines_and_byte_cap(tmp_path: Path) -> None:
    (tmp_path / "wide.txt").write_text("needle " + "z" * 1200 + "\n")
    (tmp_path / "lots.txt").write_text("".join(f"needle {n} " + "y" * 480 + "\n" for n in range(300)))
    ws = Workspace([tmp_path])
    for engine in ("rg", "python") if find_rg() else ("python",):
        wide = grep(ws, "needle", "wide.txt", engine=engine)  # type: ignore[arg-type]
        assert wide.text.startswith("wide.txt:1:needle " + "z" * 493 + "... [truncated]\n\n")
        assert wide.text.endswith("[Some lines truncated to 500 chars. Use read tool to see full lines]")
        lots = grep(ws, "needle", "lots.txt", limit=1000, engine=engine)  # type: ignore[arg-type]
        assert lots.text.endswith("[50.0KB limit reached]")
        assert lots.details["truncation"]["output_bytes"] <= 50 * 1024


def test_grep_on_real_letta_files() -> None:
    files = shared_path("letta-filesystem", "files")
    ws = Workspace([files])
    out = grep(ws, r"^account_id: acct-000[1-3]$")
    assert out.text == (
        "bank_accounts.txt:2:account_id: acct-0001\n"
        "bank_accounts.txt:10:account_id: acct-0002\n"
        "bank_accounts.txt:18:account_id: acct-0003"
    )
    owner = grep(ws, "pers-0001", context=1, limit=5)
    assert owner.text.endswith("[5 matches limit reached. Use limit=10 for more, or refine pattern]")
    assert "--\n" in owner.text
    if find_rg():
        both(ws, "pers-00(1|2)[0-9]", limit=40, context=2)


def test_grep_refusals_and_bad_patterns(tree: Path) -> None:
    ws = Workspace([tree])
    assert grep(ws, "TODO", "image.bin").details["error"] == "binary"
    assert grep(ws, "TODO", "../").details["error"] == "outside_roots"
    assert grep(ws, "TODO", ".env").details["error"] == "denied"
    assert grep(ws, "").details["error"] == "bad_argument"
    assert grep(ws, "x", limit=0).details["error"] == "bad_argument"
    for engine in ("rg", "python") if find_rg() else ("python",):
        bad = grep(ws, "(unclosed", engine=engine)  # type: ignore[arg-type]
        assert bad.is_error and bad.details["error"] == "bad_pattern"


def test_gitignore_rules() -> None:
    rules = parse_rules("build/\n*.log\n!keep.log\n/top.txt\ndocs/**/draft.md\n\\#hash\n# comment\n", "")
    assert ignored(rules, "build", True) and not ignored(rules, "build", False)
    assert ignored(rules, "a/b/x.log", False) and not ignored(rules, "a/keep.log", False)
    assert ignored(rules, "top.txt", False) and not ignored(rules, "a/top.txt", False)
    assert ignored(rules, "docs/draft.md", False) and ignored(rules, "docs/a/b/draft.md", False)
    assert ignored(rules, "#hash", False)
    nested = parse_rules("*.tmp\n/local\n", "sub")
    assert ignored(nested, "sub/a/x.tmp", False) and not ignored(nested, "other/x.tmp", False)
    assert ignored(nested, "sub/local", True) and not ignored(nested, "sub/a/local", True)
    assert rebase_line("/local", "sub") == "/sub/local"
    assert rebase_line("*.tmp", "sub") == "/sub/**/*.tmp"
    assert rebase_line("!keep/", "a/b") == "!/a/b/**/keep/"


def test_find_globs_limits_and_skips(tree: Path) -> None:
    ws = Workspace([tree])
    assert find(ws, "*.py").text == "src/app.py\nsrc/deep/nested/mod.py\nsrc/util.py"
    assert find(ws, "src/*.py").text == "src/app.py\nsrc/util.py"
    assert find(ws, "**/nested/*").text == "src/deep/nested/mod.py"
    assert find(ws, "*.py", "src/deep").text == "src/deep/nested/mod.py"
    assert find(ws, "deep").text == "src/deep/"
    everything = find(ws, "*").text
    for skipped in ("node_modules", ".git/", "build/", "run.log", "guide.txt", "scratch", "fifo", "out-link", ".env"):
        assert skipped not in everything, skipped
    assert "logs/keep.log" in everything and ".hidden/config.txt" in everything
    capped = find(ws, "*", limit=3)
    assert capped.text.endswith("[3 results limit reached. Use limit=6 for more, or refine pattern]")
    assert len(capped.text.split("\n\n")[0].splitlines()) == 3
    assert find(ws, "*.nothing").text == "No files found matching pattern '*.nothing'"


def test_find_on_project_tree_has_a_1000_result_cap() -> None:
    out = find(Workspace([REPO]), "*")
    count = len(out.text.split("\n\n")[0].splitlines())
    if out.details["limit_reached"]:
        assert count == 1000
        assert out.text.endswith("[1000 results limit reached. Use limit=2000 for more, or refine pattern]")
    assert "src/ctxwin/tools/read.py" in find(Workspace([REPO]), "read.py").text


def test_ls_sorting_suffixes_limits_and_ignored(tree: Path) -> None:
    ws = Workspace([tree])
    (tree / "Zeta.txt").write_text("z")
    (tree / "alpha.txt").write_text("a")
    out = ls(ws)
    body, notice = out.text.split("\n\n")
    names = body.splitlines()
    assert names[:3] == [".env", ".gitignore", ".hidden/"]
    assert names.index("alpha.txt") < names.index("docs/") < names.index("README.md") < names.index("Zeta.txt")
    assert "build/" not in names and "node_modules/" not in names and ".git/" not in names
    assert f"out-link.txt -> {tree.parent}" in names
    assert notice == "[3 ignored entries not shown (.git, node_modules, .gitignore). Use ignored_too=true to list them]"
    full = ls(ws, ignored_too=True).text
    assert "build/" in full and "node_modules/" in full and ".git/" in full
    capped = ls(ws, limit=2)
    assert capped.text.startswith(".env\n.gitignore\n\n[2 entries limit reached. Use limit=4 for more.")
    assert ls(ws, "logs").text == (
        "keep.log\n\n[1 ignored entries not shown (.git, node_modules, .gitignore). Use ignored_too=true to list them]"
    )
    (tree / "empty").mkdir()
    assert ls(ws, "empty").text == "(empty directory)"


def test_ls_500_entry_cap(tmp_path: Path) -> None:
    for n in range(620):
        (tmp_path / f"f{n:04d}.txt").write_text("")
    out = ls(Workspace([tmp_path]))
    body, notice = out.text.split("\n\n")
    assert len(body.splitlines()) == 500 and body.splitlines()[-1] == "f0499.txt"
    assert notice == "[500 entries limit reached. Use limit=1000 for more]"


def test_fallback_is_used_when_ripgrep_is_absent(tree: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr("sys.executable", str(tmp_path / "no-python-here" / "python"))
    assert find_rg() is None
    out = grep(Workspace([tree]), "TODO", "src")
    assert out.details["engine"] == "python" and out.text.startswith("src/app.py:4:    # TODO: parse args")
    assert grep(Workspace([tree]), "TODO", engine="rg").details["error"] == "missing_extra"


def test_find_and_ls_byte_caps(tmp_path: Path) -> None:
    for n in range(400):
        (tmp_path / (f"{n:03d}-" + "n" * 200 + ".txt")).write_text("")
    ws = Workspace([tmp_path])
    listing = ls(ws)
    assert listing.text.endswith("[50.0KB limit reached]") and listing.details["truncation"]["output_bytes"] <= 51200
    found = find(ws, "*.txt")
    assert found.text.endswith("[50.0KB limit reached]") and found.details["results"] < 400


def test_file_names_that_are_not_utf8(tmp_path: Path) -> None:
    root = os.fsencode(str(tmp_path))
    with open(os.path.join(root, b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"needle\n")
    ws = Workspace([tmp_path])
    if find_rg():
        assert both(ws, "needle") == "caf\ufffd.txt:1:needle"
    assert find(ws, "*.txt").text == "caf\ufffd.txt"
    assert ls(ws).text == "caf\ufffd.txt"
    json_ready = grep(ws, "needle", engine="python").text
    json_ready.encode("utf-8")  # printable: no lone surrogates left
