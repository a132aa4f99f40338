"""`ctxwin memory index|show|search|consolidate` over a workspace's memory folder, and `ctxwin search SESSION QUERY`
over a stored session or any transcript file. Thin wrappers over `ctxwin.memory`; `--json` prints the
library's return values."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ctxwin.cli.app import app, console, handle_errors, print_json, print_table
from ctxwin.errors import InputError
from ctxwin.files import read_text
from ctxwin.memory import SearchResult, embedder_from_spec, memory_files, open_workspace_index, startup_context
from ctxwin.memory.index import index_path
from ctxwin.memory.recall import ConversationHit, search_log

memory_app = typer.Typer(name="memory", help="The workspace's memory: index it, show it, search it.",
                         no_args_is_help=True, rich_markup_mode=None)
app.add_typer(memory_app, name="memory")

WORKSPACE = typer.Option(Path("."), "--workspace", "-w", help="The folder holding MEMORY.md and memory/.")
EMBEDDER = typer.Option("default", "--embedder", help="default, wordllama, hash, minilm or openai:<url>#<model>.")


def _results_table(results: list[SearchResult]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("path", "lines", "date", "score", "text"):
        table.add_column(name, overflow="fold")
    for r in results:
        table.add_row(escape(r.path), f"{r.start_line}-{r.end_line}", r.date or "", f"{r.score:.3f}",
                      escape(r.text))
    return table


@memory_app.command("index")
@handle_errors
def index_cmd(
    workspace: Path = WORKSPACE,
    rebuild: bool = typer.Option(False, "--rebuild", help="Forget the index and build it again from the files."),
    files: bool = typer.Option(False, "--files", help="Also index the workspace's other text files."),
    embedder: str = EMBEDDER,
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Bring the memory index up to date with MEMORY.md and memory/*.md (by content hash)."""
    index, report = open_workspace_index(workspace, embedder_from_spec(embedder), rebuild=rebuild,
                                         include_files=files)
    with index:
        stats = index.stats()
    if as_json:
        print_json({"report": report.to_dict(), "index": stats})
        return
    console.print(f"indexed {report.files_indexed} file(s), {report.files_unchanged} unchanged, "
                  f"{report.files_removed} removed; {report.chunks_added} chunk(s) added in {report.seconds:.2f} s"
                  + (" (index rebuilt)" if report.rebuilt else ""))
    console.print(f"index: {escape(str(stats.get('path')))}, {stats['chunks']} chunks, embedder {stats['embedder']}")
    for problem in report.problems:
        console.print(f"[yellow]warning:[/] {escape(problem)}")


@memory_app.command("show")
@handle_errors
def show(
    workspace: Path = WORKSPACE,
    as_json: bool = typer.Option(False, "--json", help="Print as one JSON object."),
) -> None:
    """The memory files, what a session starting today loads of them, and the index's state."""
    from ctxwin.policies.model import BootstrapPolicy

    if not workspace.is_dir():
        raise InputError(f"no workspace folder at {workspace}", "give the folder that holds MEMORY.md and memory/")
    files = memory_files(workspace)
    loaded = startup_context(workspace, date.today(), BootstrapPolicy(enabled=True, files=[]))
    path = index_path(workspace)
    data: dict[str, Any] = {
        "workspace": str(workspace), "files": files,
        "startup": [{"name": f.name, "chars": f.chars, "injected_chars": f.injected_chars} for f in loaded.files],
        "index": str(path) if path.exists() else None,
    }
    if as_json:
        print_json(data)
        return
    console.print(f"{len(files)} memory file(s) in {escape(str(workspace))}")
    for name in files:
        console.print(f"  {escape(name)}")
    console.print("loaded at session start: " + (", ".join(
        f"{f.name} ({f.injected_chars:,}/{f.chars:,} chars)" for f in loaded.files) or "nothing"))
    console.print(f"index: {escape(str(path)) if path.exists() else 'none yet (ctxwin memory index)'}")


@memory_app.command("search")
@handle_errors
def search_cmd(
    query: str | None = typer.Argument(None, help="What to look for (or give --queries)."),
    workspace: Path = WORKSPACE,
    k: int = typer.Option(6, "-k", min=1, max=100, help="Results per query."),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid, bm25 or vector."),
    queries: Path | None = typer.Option(None, "--queries", help="A file of queries, one a line: one JSON line "
                                        "of results out per query, the index loaded once."),
    files: bool = typer.Option(False, "--files", help="Search the workspace's files too."),
    hops: int = typer.Option(1, "--hops", min=1, max=5, help="Chained look-ups: 2-4 for a question that goes "
                             "through one thing to another (each hop searches for what the best hits name)."),
    max_chars: int | None = typer.Option(None, "--max-chars", min=80, help="Characters of text for all results "
                                         "together (default 400 per result: 2,000 for -k 5)."),
    embedder: str = EMBEDDER,
    as_json: bool = typer.Option(False, "--json", help="Print the results as one JSON object."),
) -> None:
    """Search MEMORY.md and memory/*.md by meaning and by words. Each result is its matching unit (a
    turn, a section, a paragraph) with the matching lines first, within --max-chars for all; --json
    gives its text, path, lines, date and a ref (memory_get reads it)."""
    if (query is None) == (queries is None):
        raise InputError("give either a QUERY or --queries FILE", "ctxwin memory search 'staging port'")
    lines = [query or ""] if queries is None else [q for q in read_text(queries).splitlines() if q.strip()]
    index, _report = open_workspace_index(workspace, embedder_from_spec(embedder), include_files=files)
    sources = ["memory", "files"] if files else ["memory"]
    with index:
        for line in lines:
            results = index.search(line, k=k, mode=mode, sources=sources, hops=hops,  # type: ignore[arg-type]  # typer gives mode as str; search refuses others
                                   max_chars=max_chars)
            if queries is not None or as_json:
                print_json({"query": line, "results": [r.to_dict() for r in results]})
            else:
                console.print(_results_table(results) if results else "no matches")


RELATIVE_DAY = re.compile(r"(\d{1,5})d")  # `7d`: seven days ago


def parse_day(value: str | None, flag: str, today: date | None = None) -> str | None:
    """A --since/--until value as the ISO date or time the search takes: YYYY-MM-DD, an ISO 8601
    time, `today`, `yesterday` or `Nd` (N days ago). Raises `InputError` naming the flag."""
    if value is None:
        return None
    text = value.strip().lower()
    day = today or date.today()
    relative = RELATIVE_DAY.fullmatch(text)
    if text in ("today", "yesterday") or relative:
        back = 0 if text == "today" else 1 if text == "yesterday" else int(relative.group(1)) if relative else 0
        return (day - timedelta(days=back)).isoformat()
    try:
        if len(text) == 10:
            date.fromisoformat(text)
        else:
            datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{flag} {value!r} is not a date",
                         f"write {flag} YYYY-MM-DD, an ISO 8601 time, today, yesterday or 7d (7 days ago)") from None
    return value.strip()


def _hits_table(hits: list[ConversationHit]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("ref", "role", "time", "score", "snippet"):
        table.add_column(name, overflow="fold")
    for h in hits:
        table.add_row(escape(h.ref), h.role or "", (h.timestamp or "")[:19], f"{h.score:.3f}",
                      escape(h.snippet[:300].replace("\n", " ")))
    return table


@app.command("search")
@handle_errors
def search_session(
    session: Path = typer.Argument(..., help="A stored session folder, or any transcript file ctxwin reads."),
    query: str = typer.Argument(..., help="What to look for."),
    k: int = typer.Option(5, "-k", min=1, max=100, help="Results."),
    roles: list[str] | None = typer.Option(None, "--role", help="Only these roles (assistant, user, tool)."),
    start_date: str | None = typer.Option(None, "--since", help="Only messages on or after this day: YYYY-MM-DD, "
                                          "an ISO 8601 time, today, yesterday or Nd (N days ago)."),
    end_date: str | None = typer.Option(None, "--until", help="Only messages on or before this day (the same forms)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as one JSON object."),
) -> None:
    """Search every message of a session, the ones compaction or masking took out of the view included.
    Each hit's ref (entry:<id>#<call>) returns the original text through recall."""
    from ctxwin.store import Session
    from ctxwin.store.in_memory import MemorySessionLog
    from ctxwin.store.session import is_session_dir
    from ctxwin.transcripts import load_transcript

    untimed: set[str] = set()  # entries of messages with no recorded time
    if is_session_dir(session):
        log: Any = Session.open(session, readonly=True)
        kind = "session"
    elif session.is_file():
        from ctxwin.evaluation.replay import timestamp

        transcript = load_transcript(session)
        when = [0.0]  # each message logged at its recorded time, so --since/--until work on transcripts
        log = MemorySessionLog(session_id=transcript.session_id or session.stem, clock=lambda: when[0])
        for message in transcript.messages:
            recorded = timestamp(message)
            when[0] = recorded or when[0]
            entry = log.append("message", message.to_dict())
            if recorded is None:
                untimed.add(entry.id)
        kind = "transcript"
    else:
        raise InputError(f"{session} is neither a session folder nor a file", "give a session folder or a transcript")
    try:
        hits = search_log(log, query, limit=k, roles=roles or None, start_date=parse_day(start_date, "--since"),
                          end_date=parse_day(end_date, "--until"))
    finally:
        log.close()
    # A message the file gave no time is shown without one (not as the epoch, or its neighbour's time).
    hits = [replace(h, timestamp=None) if h.ref.removeprefix("entry:").partition("#")[0] in untimed else h
            for h in hits]
    if as_json:
        print_json({"session": str(session), "kind": kind, "query": query, "results": [h.to_dict() for h in hits]})
        return
    if hits:
        print_table(_hits_table(hits))
    else:
        console.print("no matches")
    if kind == "transcript" and hits:
        console.print("[dim]refs of a transcript file are positions in it; import it (ctxwin import) for "
                      "refs that recall resolves[/]")


@memory_app.command("consolidate")
@handle_errors
def consolidate_cmd(
    workspace: Path = WORKSPACE,
    sessions: Path | None = typer.Option(None, "--sessions", help="The ctxwin sessions to read (default: "
                                         "<workspace>/.ctxwin/sessions when it exists).", show_default=False),
    since: str | None = typer.Option(None, "--since", help="Read notes and sessions from this day (YYYY-MM-DD) "
                                     "instead of from where the last run stopped.", show_default=False),
    dry_run: bool = typer.Option(False, "--dry-run", help="Write nothing; say what would change."),
    max_chars: int = typer.Option(12_000, "--max-chars", min=1_000, help="MEMORY.md's cap in characters."),
    model: str | None = typer.Option(None, "--model", "-m", help="Extract facts with this model (default: the "
                                     "deterministic rules, no model).", show_default=False),
    api: str = typer.Option("openai", "--api", help="The model's API: anthropic, openai or openai-responses."),
    base_url: str | None = typer.Option(None, "--base-url", help="The model's endpoint.", show_default=False),
    api_key: str | None = typer.Option(None, "--api-key", help="Key (default: ANTHROPIC_API_KEY / OPENAI_API_KEY).",
                                       show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Turn the daily notes and session logs since the last run into a short, current, sourced MEMORY.md
    (under --max-chars) and memory/wiki/<topic>.md pages that keep every fact's history."""
    from ctxwin.memory.consolidate import ModelExtractor, consolidate
    from ctxwin.providers import client_for

    extractor = None
    if model is not None or base_url is not None:
        extractor = ModelExtractor(client_for(api, base_url, model, api_key=api_key))  # type: ignore[arg-type]  # client_for refuses an unknown api
    report = consolidate(workspace, sessions=sessions, since=since, dry_run=dry_run, max_chars=max_chars,
                         extractor=extractor)
    if as_json:
        print_json(report.to_dict() | ({"memory_md": report.memory_text} if dry_run else {}))
        return
    m = report.merge
    console.print(f"read {len(report.notes_read)} note(s) ({report.bytes_read:,} bytes) and "
                  f"{len(report.sessions_read)} session(s) ({report.entries_read:,} entries): {report.units} "
                  f"statements, {report.observations} facts stated; {m.added} new, {m.restated} restated, "
                  f"{m.superseded} superseded, {m.closed} task(s) closed", highlight=False)
    console.print(f"MEMORY.md: {report.memory_chars:,} chars, {report.in_memory} current facts "
                  f"({report.wiki_only} more only in memory/wiki/); {report.facts} facts in all", highlight=False)
    files = report.would_write if dry_run else report.written
    verb = "would write" if dry_run else "wrote"
    console.print(f"{verb}: {', '.join(files)}" if files else "nothing new: no file changed", highlight=False)
    for name in report.archived:
        console.print(f"hand edits kept as a note: {escape(name)}", highlight=False)
    for problem in report.problems:
        console.print(f"[yellow]warning:[/] {escape(problem)}")
