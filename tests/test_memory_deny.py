"""The memory tools apply the workspace deny list: a secret in the workspace (suffixless `id_rsa`,
`credentials`, `.aws/credentials`, `.env.local`, a `*.pem`, ...) is never listed for the index, never
read into it, never returned by `semantic_search_files` or opened by `open_files`, and its content is
in no search hit, nor anywhere in the index's SQLite file. Normal files are found. Symlinks and hard
links do not lead to what the list names or out of the workspace."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin.memory import HashEmbedder, MemoryIndex, MemoryTools
from ctxwin.memory.files import FileScope, workspace_files
from ctxwin.paths import DEFAULT_DENY, deny_match
from ctxwin.tools import Workspace
from ctxwin.tools.workspace import deny_match as tools_deny_match

# name -> a token only that file holds
SECRETS = {
    "id_rsa": "SECRET-idrsa-5521",
    "credentials": "SECRET-credentials-7734",
    "credentials.json": "SECRET-credjson-1190",
    ".aws/credentials": "SECRET-aws-3308",
    ".env.local": "SECRET-dotenv-9061",
    "certs/server.pem": "SECRET-pem-4417",
    "keys/id_ed25519": "SECRET-ed25519-2285",
    "private.key": "SECRET-privkey-6652",
}
NORMAL = {
    "README.md": "The payment service retries webhooks three times with backoff.\n",
    "notes.txt": "Rotate the staging certificates every ninety days.\n",
    "src/app.py": "def start_server(port=8080):\n    return port\n",
    "Makefile": "build:\n\tcc -o widget widget.c\n",
}
OUTSIDE_TOKEN = "SECRET-outside-8813"


def make_workspace(base: Path) -> Path:
    root = base / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text("The deploy window is Tuesday morning.\n")
    for name, token in SECRETS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"-----BEGIN KEY----- {token} -----END KEY-----\n")
    for name, text in NORMAL.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    outside = base / "outside"
    outside.mkdir()
    (outside / "leak.txt").write_text(f"outside the workspace {OUTSIDE_TOKEN}\n")
    (root / "innocent.txt").symlink_to(root / "id_rsa")  # a harmless name for a denied file
    (root / "escape.txt").symlink_to(outside / "leak.txt")  # a file outside the workspace
    (root / "elsewhere").symlink_to(outside)  # a folder outside the workspace
    (root / "up.txt").symlink_to("../outside/leak.txt")  # `..` out, relative
    os.link(root / "credentials", root / "harmless.txt")  # a hard link: the same secret under another name
    return root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_workspace(tmp_path)


@pytest.fixture
def tools(root: Path, tmp_path: Path) -> Iterator[MemoryTools]:
    with MemoryIndex.open(tmp_path / "index.sqlite", HashEmbedder(64)) as index:
        yield MemoryTools(root, index, session="s1")


def all_tokens() -> list[str]:
    return [*SECRETS.values(), OUTSIDE_TOKEN]


def test_the_deny_list_is_one_definition_the_tools_still_use() -> None:
    from ctxwin import tools
    from ctxwin.tools import workspace

    assert tools.DEFAULT_DENY is DEFAULT_DENY and workspace.DEFAULT_DENY is DEFAULT_DENY
    assert tools_deny_match is deny_match
    assert Workspace.__dataclass_fields__["deny"].default is DEFAULT_DENY


def test_workspace_files_lists_the_normal_files_only(root: Path) -> None:
    assert workspace_files(root) == sorted(NORMAL, key=lambda p: (p.count("/"), p))  # walk order: folder by folder
    for name in SECRETS:
        assert deny_match(name, DEFAULT_DENY) is not None, name  # each is refused by the list, not by luck


def test_a_custom_deny_list_applies(root: Path) -> None:
    (root / "private").mkdir()
    (root / "private" / "plan.md").write_text("private plan\n")
    assert "private/plan.md" in workspace_files(root)
    custom = FileScope(root, (*DEFAULT_DENY, "private", "notes.txt"))
    listed = workspace_files(custom)
    assert "private/plan.md" not in listed and "notes.txt" not in listed and "README.md" in listed
    # Without the defaults, a caller's own list is all that applies: id_rsa is then listed.
    assert "id_rsa" in workspace_files(FileScope(root, ("notes.txt",)))
    assert "harmless.txt" in workspace_files(FileScope(root, allow_hard_links=True))


def test_semantic_search_files_never_returns_a_denied_file(tools: MemoryTools, root: Path, tmp_path: Path) -> None:
    found = tools.run("semantic_search_files", {"query": "start server port"})
    assert not found.is_error and found.details["results"][0]["path"] == "src/app.py"
    found = tools.run("semantic_search_files", {"query": "payment webhooks backoff"})
    assert found.details["results"][0]["path"] == "README.md"
    for token in all_tokens():
        out = tools.run("semantic_search_files", {"query": f"{token} BEGIN KEY", "limit": 20})
        assert token not in out.text and token not in repr(out.details)
        paths = {r["path"] for r in out.details["results"]}
        assert paths <= set(NORMAL), paths
    assert sorted(tools.index.backend.file_paths("files")) == sorted(NORMAL)
    for token in all_tokens():  # no source at all (memory, files, session) holds the content
        for mode in ("hybrid", "bm25", "vector"):
            hits = tools.index.search(token, k=50, mode=mode)
            assert all(token not in h.snippet for h in hits)
    tools.index.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("index.sqlite*"))
    assert b"start_server" in stored  # the check below can see text, so its silence means something
    for token in all_tokens():
        assert token.encode() not in stored, token


def test_an_index_built_before_the_deny_list_forgets_the_secrets(root: Path, tmp_path: Path) -> None:
    with MemoryIndex.open(tmp_path / "old.sqlite", HashEmbedder(64)) as index:
        index.index_files(root, [*SECRETS, *NORMAL], "files")  # as the old workspace_files fed it
        assert any(SECRETS["id_rsa"] in h.snippet for h in index.search(SECRETS["id_rsa"], mode="bm25"))
        tools = MemoryTools(root, index)
        out = tools.run("semantic_search_files", {"query": SECRETS["id_rsa"], "limit": 20})
        assert SECRETS["id_rsa"] not in out.text
        assert sorted(index.backend.file_paths("files")) == sorted(NORMAL)
        assert not any(SECRETS["id_rsa"] in h.snippet for h in index.search(SECRETS["id_rsa"], mode="bm25"))


def test_index_files_refuses_what_the_deny_list_names(root: Path, tmp_path: Path) -> None:
    with MemoryIndex.open(tmp_path / "direct.sqlite", HashEmbedder(64)) as index:
        report = index.index_files(root, ["id_rsa", ".aws/credentials", "notes.txt"], "files", deny=DEFAULT_DENY)
        assert report.files_seen == 1 and report.files_indexed == 1 and not report.problems
        assert index.backend.file_paths("files") == ["notes.txt"]


def test_the_file_index_never_follows_a_symlink_out(root: Path, tmp_path: Path) -> None:
    """What the walk would never list, given by hand (or swapped in after the listing): each symlink,
    on the way or at the end, is refused and reported; the same list read following symlinks would
    index the file outside, so the refusal is the confined reader's doing."""
    links = ["escape.txt", "up.txt", "elsewhere/leak.txt", "innocent.txt"]
    with MemoryIndex.open(tmp_path / "links.sqlite", HashEmbedder(64)) as index:
        report = index.index_files(root, [*links, "notes.txt"], "files", follow_symlinks=False)
        assert index.backend.file_paths("files") == ["notes.txt"]
        assert sorted(p.split(":")[0] for p in report.problems) == sorted(links)
        followed = index.index_files(root, ["escape.txt"], "other")
        assert followed.files_indexed == 1  # the unconfined reader does follow it (what the test rules out)
    os.mkfifo(root / "pipe.txt")  # and a FIFO never blocks the confined reader
    with MemoryIndex.open(tmp_path / "fifo.sqlite", HashEmbedder(64)) as index:
        report = index.index_workspace(root, include_files=True)
        assert any(p.startswith("pipe.txt:") for p in report.problems)
        assert sorted(index.backend.file_paths("files")) == sorted(NORMAL)


def test_memory_tools_built_from_a_workspace_use_its_deny_list(root: Path, tmp_path: Path) -> None:
    workspace = Workspace(roots=[root], deny=(*DEFAULT_DENY, "*.txt"))
    scope = FileScope(Path(workspace.roots[0]), workspace.deny, workspace.allow_hard_links)
    with MemoryIndex.open(tmp_path / "ws.sqlite", HashEmbedder(64)) as index:
        tools = MemoryTools(root, index, files=scope)
        out = tools.run("semantic_search_files", {"query": "rotate staging certificates", "limit": 20})
        assert "notes.txt" not in {r["path"] for r in out.details["results"]}
        assert sorted(index.backend.file_paths("files")) == ["Makefile", "README.md", "src/app.py"]


def test_open_files_refuses_denied_files(tools: MemoryTools) -> None:
    out = tools.run("open_files", {"files": [{"file_name": "id_rsa"}, {"file_name": ".aws/credentials"},
                                             {"file_name": "./keys/ID_ED25519"}]})
    assert out.is_error and out.details["denied"] == ["id_rsa", ".aws/credentials", "./keys/ID_ED25519"]
    assert "deny list" in out.text and not out.details["opened"]
    both = tools.run("open_files", {"files": [{"file_name": "notes.txt"}, {"file_name": ".env.local"}]})
    assert not both.is_error and both.details["opened"] == ["notes.txt"] and both.details["denied"] == [".env.local"]
    block = tools.working_set.render()
    assert "ninety days" in block and not any(token in block for token in all_tokens())
    # Symlinks stay refused by the confined reader (a harmless name for id_rsa, a file outside).
    for name in ("innocent.txt", "escape.txt", "elsewhere/leak.txt", "up.txt", "../outside/leak.txt"):
        refused = tools.run("open_files", {"files": [{"file_name": name}]})
        assert refused.is_error and not any(t in refused.text for t in all_tokens()), name


# A name drawn from the deny list's own words and ordinary ones, so both kinds turn up.
_SEGMENT = st.sampled_from(["id_rsa", "id_rsa.pub", "credentials", "Credentials.yaml", ".env", ".env.prod", "key.pem",
                            "site.KEY", "vault.kdbx", ".pgpass", "notes.md", "app.py", "data.json", "docs",
                            "src", "config", "README"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(_SEGMENT, min_size=1, max_size=3), min_size=1, max_size=8))
def test_no_listed_file_is_ever_one_the_workspace_would_refuse(trees: list[list[str]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for parts in trees:
            path = root.joinpath(*parts)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if not path.exists():
                    path.write_text("x\n")
            except (FileExistsError, NotADirectoryError):
                continue  # a name already used as a file (or a folder) by another draw
        listed = workspace_files(root)
        workspace = Workspace(roots=[root])
        for rel in listed:
            assert deny_match(rel, DEFAULT_DENY) is None, rel
            assert workspace.resolve(rel).is_file  # the tools' own sandbox accepts every listed file
        for path in root.rglob("*"):
            rel = path.relative_to(root).as_posix()
            plain = path.is_file() and not any(p.startswith(".") for p in rel.split("/"))
            eligible = plain and (path.suffix.lower() in {".md", ".py", ".json", ".yaml"} or not path.suffix)
            if eligible and deny_match(rel, DEFAULT_DENY) is None:
                assert rel in listed, rel  # and nothing ordinary is lost


def test_the_confined_reader_caps_what_it_reads(tmp_path: Path) -> None:
    from ctxwin.errors import FileTooLargeError
    from ctxwin.memory.sandbox import Confined

    (tmp_path / "big.txt").write_bytes(b"x" * 11)
    folder = Confined(tmp_path, alias=None)
    assert folder.read_bytes("big.txt", 11) == b"x" * 11
    with pytest.raises(FileTooLargeError, match="over the size cap of 10 bytes"):
        folder.read_bytes("big.txt", 10)
