"""Texts for fitting and measuring the token estimator, labelled by content type.

Two sources, kept apart so that the fit never sees the texts it is judged on:

- `machine_corpus()`: text already on these machines, sampled with a fixed seed: Python, JavaScript,
  C++, Perl and shell sources (some re-indented with tabs, some with Read-style `N→` line numbers),
  Markdown and reStructuredText docs (some with fenced code blocks, like an assistant's answer, some
  with emoji sprinkled in), the output of ordinary shell commands run here (git in a scratch
  repository among them), JSON files and tool-call arguments built from the code, Chinese, Japanese
  and Korean running text (the localized manual pages, rendered, and GnuPG's help) and UI strings (the
  .mo translations in /usr/share/locale), and random base64/hex/UUID text. Missing sources are
  skipped, so the corpus is smaller (not wrong) on another machine.
- `transcript_items()`: the texts of a real session (`ctxwin.transcripts.load_transcript`), labelled
  by where they come from: assistant and user text and thinking are prose, Read results are code,
  Bash/Grep/Glob results are shell, tool-call arguments are JSON. Sessions are split in time: the
  first half of each may be used for fitting, the second half is held out.
- `cjk_samples()`: the CJK paragraphs written for this project in `benchmarks/data/cjk/`.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import gettext
import glob
import gzip
import json
import math
import random
import re
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from ctxwin.messages import Text, Thinking, ToolCall, ToolResult
from ctxwin.transcripts import Transcript

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "transcripts"
CJK_DIR = HERE / "data" / "cjk"
STDLIB = Path(ast.__file__).parent

TOOL_TYPES = {"read": "code", "bash": "shell", "grep": "shell", "glob": "shell", "find": "shell", "ls": "shell"}
CJK_LOCALES = ("zh_CN", "zh_TW", "ja", "ko")
MAN_PAGES_PER_LANGUAGE = 30  # localized manual pages rendered per language for the CJK corpus
# CJK texts drawn from running prose (manual pages, help) rather than UI strings: what agents see in
# CJK is mostly running prose with commands in it, not short translated phrases.
CJK_DOCUMENT_SHARE = 0.8
MAX_ITEM_CHARS = 200_000  # longer texts are cut (one huge item would dominate an aggregate)


# --------------------------------------------------------------------------------------------------
# Real sessions


def transcript_files() -> list[Path]:
    """The shared sessions with real content and usage: Claude Code, Pi and SWE-agent."""
    files = sorted(SHARED.glob("claude-code/*.jsonl")) + sorted(SHARED.glob("pi/*.jsonl"))
    return files + sorted(SHARED.glob("swe-agent/*.traj"))


def transcript_items(transcript: Transcript) -> list[tuple[str, str]]:
    """(content type, text) for every labelled text of a session, in order."""
    names: dict[str, str] = {}
    items: list[tuple[str, str]] = []
    for message in transcript.messages:
        for block in message.blocks:
            if isinstance(block, Text) and block.text.strip() and message.role in ("user", "assistant"):
                items.append(("prose", block.text))
            elif isinstance(block, Thinking) and block.thinking.strip() and not block.redacted:
                items.append(("prose", block.thinking))
            elif isinstance(block, ToolCall):
                names[block.id] = block.name
                args = block.arguments
                text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, separators=(",", ":"))
                items.append(("json", text))
            elif isinstance(block, ToolResult):
                name = (block.name or names.get(block.call_id) or "").lower()
                kind = TOOL_TYPES.get(name)
                if kind and block.text.strip():
                    items.append((kind, block.text))
    return [(kind, text[:MAX_ITEM_CHARS]) for kind, text in items]


def halves(items: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The first and second half of a session's items; held-out texts that also occur in the first
    half (a file read twice) are dropped, so the held-out half is really unseen."""
    cut = len(items) // 2
    seen = {text for _, text in items[:cut]}
    return items[:cut], [(kind, text) for kind, text in items[cut:] if text not in seen]


def cjk_samples() -> list[tuple[str, str]]:
    """The CJK paragraphs of benchmarks/data/cjk, one item each."""
    items = []
    for path in sorted(CJK_DIR.glob("*.txt")):
        for paragraph in path.read_text(encoding="utf-8").split("\n\n"):
            if paragraph.strip():
                items.append(("cjk", paragraph.strip()))
    return items


# --------------------------------------------------------------------------------------------------
# Text on this machine


class _Sampler:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def files(self, pattern: str, limit: int) -> list[str]:
        found = sorted(glob.glob(pattern, recursive=True))
        self.rng.shuffle(found)
        return found[:limit]

    def chunk(self, text: str, lo: int, hi: int) -> str:
        """A slice on line boundaries, its size log-uniform in [lo, hi] characters."""
        size = int(2 ** self.rng.uniform(math.log2(lo), math.log2(hi)))
        lines = text.splitlines(keepends=True)
        if not lines:
            return text
        start = self.rng.randrange(len(lines))
        out: list[str] = []
        total = 0
        for line in lines[start:]:
            out.append(line)
            total += len(line)
            if total >= size:
                break
        return "".join(out)


def _read(path: str) -> str | None:
    try:
        data = Path(path).read_bytes()
        return (gzip.decompress(data) if path.endswith(".gz") else data).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def _tabify(text: str) -> str:
    unit = 4 if "\n    " in text else 2
    return re.sub(rf"(?m)^((?: {{{unit}}})+)", lambda m: "\t" * (len(m.group(1)) // unit), text)


def _line_numbers(s: _Sampler, text: str) -> str:
    style = s.rng.choice(["{:6d}→{}", "{:>6}\t{}", "{}: {}", "{}"])
    first = s.rng.randint(1, 400)
    return "\n".join(style.format(i, line) if style != "{}" else line for i, line in enumerate(text.split("\n"), first))


def _code_sources(s: _Sampler) -> list[str]:
    pyenv = STDLIB.parent.parent
    paths = (s.files(f"{STDLIB}/**/*.py", 400) + s.files("/usr/lib/node_modules/npm/**/*.js", 200)
             + s.files("/usr/include/c++/12/**/*.h", 40) + s.files("/usr/include/llvm-14/llvm/**/*.h", 80)
             + s.files("/usr/share/perl/**/*.pm", 40) + s.files("/usr/lib/google-cloud-sdk/**/*.sh", 30)
             + s.files(f"{pyenv}/**/*.toml", 20) + s.files("/usr/lib/google-cloud-sdk/**/*.yaml", 40))
    return [_tabify(t) if s.rng.random() < 0.35 else t for t in map(_read, paths) if t]


def _prose_sources(s: _Sampler) -> list[str]:
    paths = (s.files("/usr/share/doc/nodejs/**/*.md", 150) + s.files("/usr/lib/node_modules/npm/**/*.md", 100)
             + s.files(f"{STDLIB.parent.parent}/**/*.rst", 200) + s.files("/usr/share/cmake-3.25/Help/**/*.rst", 100))
    texts = [t for t in map(_read, paths) if t]
    for path in s.files(f"{STDLIB}/*.py", 150):
        try:
            tree = ast.parse(_read(path) or "")
        except SyntaxError:
            continue
        docs = [ast.get_docstring(node) for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Module)]
        docs = [d for d in docs if d and len(d) > 200]
        if docs:
            texts.append("\n\n".join(docs))
    return texts


_BAD_C = """#include <stdio.h>
int main(void) {
    int x = "hello";
    printf("%d\\n", y);
    for (int i = 0; i < 10; i++) { foo(i) }
    return 0
}
"""
_FAILING_TESTS = """import json
def test_dict():
    assert {"a": 1, "b": [1, 2, 3], "c": "hello world"} == {"a": 1, "b": [1, 2, 4], "c": "hello there"}
def test_list():
    assert list(range(30)) == list(range(1, 31))
def test_exc():
    json.loads('{"key": value}')
def test_str():
    assert "The quick brown fox jumps over the lazy dog" * 3 == "The quick brown fox jumped over the lazy dog" * 3
"""
_RICH = """import io, os, importlib.metadata as md
from rich.console import Console
from rich.table import Table
from rich.tree import Tree
from rich.panel import Panel
c = Console(file=io.StringIO(), width=110, color_system=None)
t = Table(title="Packages")
for col in ("name", "version", "files", "summary"): t.add_column(col)
for d in list(md.distributions())[:40]:
    t.add_row(d.metadata["Name"], d.version, str(len(d.files or [])), (d.metadata["Summary"] or "")[:60])
c.print(t)
tree = Tree("/usr/lib/node_modules/npm")
for root, dirs, files in os.walk("/usr/lib/node_modules/npm/lib"):
    node = tree.add(root)
    for f in files[:8]: node.add(f)
c.print(tree)
c.print(Panel(open("/usr/share/doc/nodejs/README.md").read()[:3000], title="README"))
try:
    import json; json.loads("{bad json")
except Exception:
    c.print_exception()
print(c.file.getvalue())
"""


def _shell_commands(python: str, scratch: Path) -> list[str]:
    lib, lib13 = STDLIB, STDLIB.parent.parent.parent / "3.13.0" / "lib" / "python3.13"
    return [
        "ls -la /usr/lib", "ls -la /usr/bin", "ls -laR /usr/share/doc/python3-pip",
        "find /usr/lib/node_modules/npm -maxdepth 3", f"find {lib}/json {lib}/email -type f", "dpkg -l", "ps aux",
        "df -h", "mount", "du -ah /usr/share/doc/nodejs", f"{python} -m pip list", f"{python} -m pip show -f rich",
        f"grep -rn 'def ' {lib}/json", f"grep -rn 'import' {lib}/logging",
        "grep -rn TODO /usr/lib/node_modules/npm/lib",
        "apt-cache show python3 bash coreutils", "man -P cat ls", "man -P cat grep", "man -P cat find",
        "stat /usr/bin/*z*", f"{python} -X importtime -c 'import rich.console'",
        f"diff -u {lib}/json/decoder.py {lib13}/json/decoder.py", f"diff -u {lib}/shutil.py {lib13}/shutil.py",
        f"diff -u {lib}/argparse.py {lib13}/argparse.py", f"{python} -c 'import json; json.loads(\"{{bad\")'",
        f"{python} -m pytest --co -q {lib}/test/test_json",
        f"{python} -m pytest -q -x {lib}/test/test_json -p no:cacheprovider",
        "npm help install", "npm ls -g", "ls -la /etc", "cat /etc/services", "uname -a; cat /proc/cpuinfo",
        f"ls -la {lib}", "sha256sum /usr/bin/[a-d]*", f"wc -l {lib}/*.py", "tail -n 300 /var/log/dpkg.log",
        f"{python} -m pip check", f"{python} -m pydoc json", "node --help", "gcc --help", "cmake --help-command-list",
        "find /usr/lib/node_modules/npm -type f | head -3000", f"find {lib} -name '*.py' | head -3000",
        "grep -rn 'function' /usr/lib/node_modules/npm/lib | head -1500",
        f"grep -rn 'class ' {lib}/asyncio | head -800",
        "grep -rn --include='*.h' 'template' /usr/include/c++/12/bits | head -800",
        "ls -laR /usr/lib/node_modules/npm/lib | head -3000", f"gcc -Wall -c {scratch}/bad.c -o /dev/null",
        f"cd {scratch} && {python} -m pytest -q -p no:cacheprovider test_fail.py",
        f"cd {scratch} && {python} -m pytest -p no:cacheprovider -vv test_fail.py", f"{python} {scratch}/richout.py",
        "node -e 'const a = {}; a.b.c()'", "node -e 'JSON.parse(\"{x\")'",
        f"{python} -c 'import asyncio; asyncio.run(asyncio.sleep(\"x\"))'", "npm ls -g --all",
        f"{python} -m ruff check {lib}/email --select ALL --output-format full | head -3000",
    ]


# A scratch git repository of stdlib packages with a few commits: agents run git and `find .` in
# repositories all the time, and their output is dense with 40-hex object names.
_GIT_SETUP = """set -e
mkdir repo && cd repo && git init -q
cp -r {lib}/json {lib}/email {lib}/logging {lib}/http .
git add -A && git -c user.name=dev -c user.email=dev@example.com commit -qm "Import the packages"
sed -i 's/import /import  /' json/*.py && git -c user.name=dev -c user.email=dev@example.com commit -qam "Reformat"
cp -r {lib}/asyncio . && git add -A && git -c user.name=dev -c user.email=dev@example.com commit -qm "Add asyncio"
"""


def _git_commands(scratch: Path) -> list[str]:
    repo = scratch / "repo"
    return [
        f"cd {repo} && find .", f"cd {repo} && find .git -type f", f"git -C {repo} log --stat",
        f"git -C {repo} log -p -n 2 | head -3000", f"git -C {repo} ls-tree -r HEAD",
        f"git -C {repo} rev-list --objects --all", f"git -C {repo} log --format=fuller",
        f"git -C {repo} show --stat HEAD~1", f"git -C {repo} blame -l json/decoder.py",
        f"git -C {repo} diff HEAD~2 --stat", f"git -C {repo} count-objects -v",
        f"git -C {repo} fsck --full 2>&1 | head",
    ]


def _shell_outputs(python: str) -> list[str]:
    outputs = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        (scratch / "bad.c").write_text(_BAD_C)
        (scratch / "test_fail.py").write_text(_FAILING_TESTS)
        (scratch / "richout.py").write_text(_RICH)
        git = subprocess.run(["bash", "-c", _GIT_SETUP.format(lib=STDLIB)], cwd=scratch, capture_output=True)
        commands = _shell_commands(python, scratch) + (_git_commands(scratch) if git.returncode == 0 else [])
        for command in commands:
            try:
                done = subprocess.run(["bash", "-c", command + " 2>&1"], capture_output=True, timeout=120)
            except subprocess.TimeoutExpired:
                continue
            text = done.stdout.decode("utf-8", "replace")
            if len(text) > 50:
                outputs.append(text)
    return outputs


def _json_docs(s: _Sampler) -> list[object]:
    paths = (s.files(f"{STDLIB.parent.parent}/**/*.json", 300) + s.files("/usr/lib/node_modules/npm/**/*.json", 100)
             + s.files("/usr/lib/google-cloud-sdk/lib/**/*.json", 100))
    docs = []
    for path in paths:
        with contextlib.suppress(json.JSONDecodeError):
            docs.append(json.loads(_read(path) or ""))
    return docs


def _tool_arguments(s: _Sampler, code: list[str], prose: list[str], commands: list[str]) -> dict[str, object]:
    snippet = s.chunk(s.rng.choice(code), 10, 20000)
    kind = s.rng.randrange(5)
    if kind == 0:
        return {"file_path": f"/home/USER/projects/app/lib/{'x' * s.rng.randint(3, 12)}.py", "old_string": snippet,
                "new_string": s.chunk(snippet, 10, 4000) + s.chunk(s.rng.choice(code), 10, 2000), "replace_all": False}
    if kind == 1:
        return {"command": s.rng.choice(commands), "description": "Run the check and show the output",
                "timeout": 120000}
    if kind == 2:
        return {"path": f"/home/USER/src/{s.rng.randint(1, 999)}/main.ts", "content": snippet}
    if kind == 3:
        return {"pattern": "def \\w+\\(", "path": "/home/USER/src", "output_mode": "content", "-n": True}
    return {"todos": [{"content": s.chunk(s.rng.choice(prose), 10, 200).strip(),
                       "status": s.rng.choice(["pending", "completed", "in_progress"]), "activeForm": "Working"}
                      for _ in range(s.rng.randint(1, 8))]}


def _cjk_sources() -> list[str]:
    """UI strings of the zh/ja/ko translations (.mo catalogs): short phrases full of placeholders."""
    texts = []
    for lang in CJK_LOCALES:
        for path in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
            try:
                with open(path, "rb") as handle:
                    catalog = gettext.GNUTranslations(handle)._catalog  # type: ignore[attr-defined]
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            values = [v for k, v in catalog.items() if k and isinstance(v, str) and len(v) > 10]
            if values:
                texts.append("\n".join(values))
    return texts


def _cjk_documents(s: _Sampler) -> list[str]:
    """Running CJK prose with commands and options in it: the zh/ja/ko manual pages, rendered, and
    GnuPG's help texts."""
    texts = [t for t in map(_read, [f"/usr/share/gnupg/help.{lang}.txt" for lang in CJK_LOCALES]) if t]
    for lang in CJK_LOCALES:
        for path in s.files(f"/usr/share/man/{lang}/man*/*.gz", MAN_PAGES_PER_LANGUAGE):
            try:
                done = subprocess.run(["bash", "-c", f"man -E UTF-8 -l {path} 2>/dev/null | col -b"],
                                      capture_output=True, timeout=30,
                                      env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
            except subprocess.TimeoutExpired:
                continue
            text = done.stdout.decode("utf-8", "replace")
            if len(text) > 200 and not text.isascii():
                texts.append(text)
    return texts


# Emoji as agents and people write them: single code points in and beyond the BMP, variation
# selectors, skin tones, ZWJ sequences and flags.
EMOJI = ("✅", "❌", "⚠️", "✨", "🎉", "🚀", "👍", "🔥", "📦", "🐛", "💡", "🙏", "😅", "🤔", "👀", "📝", "🧪", "🔧",
         "👍🏽", "👨‍💻", "👩‍🔬", "🏳️‍🌈", "🇯🇵", "🇫🇷", "❤️", "⭐", "➡️", "🟢", "🔴", "🤖")
EMOJI_SHARE = 0.15  # prose texts with emoji sprinkled in
EMOJI_DENSITY = (0.02, 0.5)  # the share of words an emoji follows, drawn per text


def _with_emoji(rng: random.Random, text: str) -> str:
    density = rng.uniform(*EMOJI_DENSITY)
    words = text.split(" ")
    return " ".join(w + " " + "".join(rng.choices(EMOJI, k=rng.randint(1, 3))) if rng.random() < density else w
                    for w in words)


def _dense(s: _Sampler) -> str:
    n = int(2 ** s.rng.uniform(4, 13))
    kind = s.rng.randrange(5)
    if kind == 0:
        return base64.b64encode(s.rng.randbytes(n)).decode()
    if kind == 1:
        return s.rng.randbytes(n).hex()
    if kind == 2:
        return "\n".join(str(uuid.UUID(int=s.rng.getrandbits(128))) for _ in range(max(1, n // 36)))
    if kind == 3:
        return "\n".join(f"{s.rng.randbytes(32).hex()}  {s.rng.randbytes(4).hex()}.bin" for _ in range(max(1, n // 80)))
    data = base64.urlsafe_b64encode(s.rng.randbytes(n)).decode().rstrip("=")
    return f"eyJhbGciOiJIUzI1NiJ9.{data[: n // 2]}.{data[n // 2:]}"


def machine_corpus(per_type: int = 1500, seed: int = 1234, python: str = "python3") -> Iterator[tuple[str, str]]:
    """`per_type` labelled texts of each content type from what is on this machine."""
    s = _Sampler(seed)
    emoji_rng = random.Random(seed + 1)  # its own stream, so the other draws do not depend on it
    code_sources = _code_sources(s)
    prose_sources = _prose_sources(s)
    for _ in range(per_type):
        text = s.chunk(s.rng.choice(code_sources), 80, 24000)
        yield "code", (_line_numbers(s, text) if s.rng.random() < 0.7 else text)
    for _ in range(per_type):
        text = s.chunk(s.rng.choice(prose_sources), 40, 6000)
        if s.rng.random() < 0.4:  # an assistant-style answer: prose with fenced code blocks
            parts = [text]
            for _ in range(s.rng.randint(1, 3)):
                lang = s.rng.choice(["python", "typescript", "", "bash", "elixir"])
                parts.append(f"```{lang}\n{s.chunk(s.rng.choice(code_sources), 40, 3000).rstrip()}\n```")
                parts.append(s.chunk(s.rng.choice(prose_sources), 40, 1500))
            text = "\n\n".join(parts)
        if emoji_rng.random() < EMOJI_SHARE:
            text = _with_emoji(emoji_rng, text)
        yield "prose", text
    outputs = _shell_outputs(python)
    for _ in range(per_type):
        yield "shell", s.chunk(s.rng.choice(outputs), 40, 20000)
    docs = _json_docs(s)
    commands = _shell_commands(python, Path("/tmp"))
    for _ in range(per_type):
        if s.rng.random() < 0.4 and docs:
            indent = s.rng.choice([None, None, 2, 1, 4])
            compact = indent is None and s.rng.random() < 0.5
            text = json.dumps(s.rng.choice(docs), indent=indent, ensure_ascii=False,
                              separators=(",", ":") if compact else None)
            yield "json", text[: int(2 ** s.rng.uniform(6, 15))]
        else:
            args = _tool_arguments(s, code_sources, prose_sources, commands)
            yield "json", json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    catalogs, documents = _cjk_sources(), _cjk_documents(s)
    for _ in range(per_type if catalogs or documents else 0):
        sources = documents if documents and (s.rng.random() < CJK_DOCUMENT_SHARE or not catalogs) else catalogs
        yield "cjk", s.chunk(s.rng.choice(sources), 20, 8000)
    for _ in range(per_type // 3):
        yield "dense", _dense(s)
