"""Search at the grain people ask (issue 24): units (turns with their speaker, sections, code blocks),
snippets within the caller's budget with the matching lines first, dates and speakers as fields,
relative dates resolved when indexed, identifiers kept whole, hops for chained questions, and the
CLI's JSON lines with refs that memory_get resolves."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ctxwin.cli.main import app
from ctxwin.memory import HashEmbedder, MemoryIndex, MemoryTools, conversation_search
from ctxwin.memory import chunks as chunks_module
from ctxwin.memory import units as units_module
from ctxwin.memory.chunks import file_chunks, identifier_keys
from ctxwin.memory.dates import query_spans, resolve_relative
from ctxwin.memory.hops import link_terms, merge
from ctxwin.memory.snippets import query_stems, shown, stem, unit_text
from ctxwin.memory.units import text_units
from ctxwin.messages import user
from ctxwin.store.in_memory import MemorySessionLog

NOTE = """# 2023-05-08

## Session 1, 1:56 pm on 8 May 2023

Caroline: Hey Mel! Good to see you! How have you been?
Melanie: Swamped with the kids and work. What's up with you?
Caroline: I went to a LGBTQ support group yesterday and it was so powerful.
Melanie: Wow, that's cool! I painted a lake sunrise last year, by the way.
"""
JUNE = """# 2023-06-09

## Session 2, 7:55 pm on 9 June 2023

Caroline: I started a pottery class, the teacher is great.
Melanie: My kids want to try pottery as well.
"""
RECORDS = """### pet-0001 (owner: pers-0002)
name: Rex
species: Dog

### pet-0002 (owner: pers-0003)
name: Luna
species: Cat

### addr-0001 (owner: pers-0002)
city: Smithburgh
state: Wyoming

### addr-0002 (owner: pers-0003)
city: Lindsaybury
state: Delaware
"""


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "2023-05-08.md").write_text(NOTE)
    (root / "memory" / "2023-06-09.md").write_text(JUNE)
    (root / "memory" / "records.md").write_text(RECORDS)
    return root


def test_units_are_turns_sections_and_code_blocks() -> None:
    code = "## Code\n" + "Some prose about the code below. " * 25 + "\n\n```python\ndef f():\n\n    return 1\n```\n"
    units = text_units(NOTE + "\n## Ports\n- staging 8443\n- prod 443\n\n" + code)
    turns = [u for u in units if u.kind == "turn"]
    assert [u.speaker for u in turns] == ["Caroline", "Melanie", "Caroline", "Melanie"]
    assert turns[2].start_line == turns[2].end_line == 7 and turns[2].heading.endswith("8 May 2023")
    section = next(u for u in units if u.kind == "section")
    assert section.text == "## Ports\n- staging 8443\n- prod 443"
    block = next(u for u in units if u.kind == "code")
    assert block.text.startswith("```python") and block.text.endswith("```") and "\n\n" in block.text
    assert block.heading == "2023-05-08 / Code" and not any(u.text == "# 2023-05-08" for u in units)


def test_relative_dates_resolve_against_the_notes_day_and_are_searchable(tmp_path: Path) -> None:
    assert [r.label() for r in resolve_relative("yesterday and last year", date(2023, 5, 8))] == [
        "yesterday = 2023-05-07", "last year = 2022"]
    chunk = next(c for c in file_chunks("memory", "memory/2023-05-08.md", NOTE) if "support group" in c.text)
    assert chunk.timestamp == "2023-05-08" and "2023-05-07" in chunk.fields and chunk.speaker == "Caroline"
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(_workspace(tmp_path))
        hit = index.search("7 May 2023", k=1, mode="bm25")[0]
        assert "support group" in hit.text and hit.dates == ("yesterday = 2023-05-07",)
        assert hit.date == "2023-05-08" and hit.speaker == "Caroline"


def test_speakers_and_dates_are_fields_a_query_can_hit(tmp_path: Path) -> None:
    assert query_spans("what did Caroline say in May 2023") == [(date(2023, 5, 1), date(2023, 5, 31))]
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(_workspace(tmp_path))
        june = index.search("what did Caroline start in June 2023", k=3, mode="bm25")
        assert "pottery class" in june[0].text
        may = index.search("what did Caroline do in May 2023", k=3, mode="bm25")
        assert may[0].date == "2023-05-08" and may[0].speaker == "Caroline"


def test_identifiers_are_kept_whole_and_split() -> None:
    assert identifier_keys("call parseHttpRequest on pers-0045") == ["pers0045", "parse http request"]


def test_a_long_unit_shows_its_matching_lines_first_and_nothing_else() -> None:
    text = "\n".join([f"filler line number {n} about nothing" for n in range(40)] + ["the staging port is 8443"]
                     + [f"more filler {n}" for n in range(40)])
    shown, lines = unit_text(text, frozenset({"stag", "port"}), 120)
    assert "the staging port is 8443" in shown and len(shown) <= 120 and lines[0] == 41
    assert shown.startswith("…")


_LINE = st.lists(st.sampled_from(["port", "staging", "Caroline", "é", "数据", " ", "x", "🎉", "-"]), max_size=60).map(
    "".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_LINE, st.text(max_size=300).map(lambda t: t.replace("\n", " "))), min_size=1,
                max_size=40), st.integers(min_value=16, max_value=1_500),
       st.sampled_from(["staging port", "x", "数据"]))
def test_a_shown_unit_never_exceeds_its_room(lines: list[str], room: int, query: str) -> None:
    # The `…` lines between picked lines count too (they made a unit up to 5 characters too long).
    text = "\n".join(lines)
    stems = query_stems(query)
    body, numbers = unit_text(text, stems, room)
    assert len(body) <= room and all(1 <= n <= len(lines) for n in numbers)
    assert len(shown(text, text, text, stems, room).text) <= room


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=80, max_value=3_000), st.integers(min_value=1, max_value=12),
       st.sampled_from(["pottery", "Caroline support group", "kids", "pet-0001 owner", "nothing at all here"]))
def test_results_never_exceed_the_budget(tmp_path_factory, max_chars: int, k: int, query: str) -> None:
    root = tmp_path_factory.mktemp("budget")
    (root / "memory").mkdir()
    (root / "memory" / "2023-05-08.md").write_text(NOTE * 5 + "\n" + "word " * 3_000)
    with MemoryIndex.open(root / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(root)
        hits = index.search(query, k=k, max_chars=max_chars)
    assert len(hits) <= k and sum(len(h.text) for h in hits) <= max_chars


def test_hops_follow_a_chain_of_records(tmp_path: Path) -> None:
    question = "Where does the owner of the pet named Rex live?"
    assert link_terms(question, ["### pet-0001 (owner: pers-0002)\nname: Rex"], []) == ["pet-0001", "pers-0002"]
    assert link_terms("the same state as X", ["state: Wyoming\ncity: Smithburgh"], [])[0] == "Wyoming"
    assert [(k, h) for k, _, h in merge([[(1, 1.0), (2, 0.5)], [(1, 0.8), (3, 0.9)]])] == [(1, 1), (3, 2), (2, 1)]
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(_workspace(tmp_path))
        one = index.search(question, k=2, mode="bm25", context=False)
        two = index.search(question, k=2, mode="bm25", context=False, hops=2)
    assert "name: Rex" in one[0].text and not any("Smithburgh" in h.text for h in one)
    assert "name: Rex" in two[0].text and "Smithburgh" in two[1].text and two[1].hop == 2


def test_conversation_search_takes_hops_and_a_budget(tmp_path: Path) -> None:
    log = MemorySessionLog(session_id="s1")
    log.append("message", user("the deploy of release r-1042 failed on host web-7").to_dict())
    log.append("message", user("web-7 was rebooted by the on-call, Dana").to_dict())
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.add_entries(log, "s1")
        hits = conversation_search(index, "why did release r-1042 fail", hops=2, max_chars=200)
        assert any("Dana" in h.snippet for h in hits) and sum(len(h.snippet) for h in hits) <= 200
        tools = MemoryTools(tmp_path, index, session="s1")
        out = tools.run("conversation_search", {"query": "release r-1042", "hops": 2, "max_chars": 300})
        assert not out.is_error and "Dana" in out.text
        bad = tools.run("conversation_search", {"query": "release", "hops": 9})
        assert bad.is_error and "hops" in bad.text


def test_cli_queries_print_a_json_line_each_with_refs_memory_get_reads(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    queries = tmp_path / "q.txt"
    queries.write_text("support group\npottery class\n")
    result = CliRunner().invoke(app, ["memory", "search", "--workspace", str(root), "--queries", str(queries),
                                      "--json", "--embedder", "hash", "-k", "2", "--max-chars", "300", "--hops", "2"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines() if line.strip()]
    assert [line["query"] for line in lines] == ["support group", "pottery class"]
    hit = lines[0]["results"][0]
    assert {"text", "path", "start_line", "end_line", "date", "ref"} <= set(hit)
    assert hit["date"] == "2023-05-08" and hit["ref"] == f"{hit['path']}:{hit['start_line']}"
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        got = MemoryTools(root, index).run("memory_get", {"path": hit["ref"]})
    assert "support group" in got.text and got.text in hit["text"]


def test_relative_dates_cross_month_and_year_boundaries_and_the_calendars_ends(tmp_path: Path) -> None:
    new_year = date(2024, 1, 1)  # a Monday
    labels = [r.label() for r in resolve_relative("yesterday, last month, last week, last year, last Sunday",
                                                  new_year)]
    assert labels == ["yesterday = 2023-12-31", "last month = December 2023", "last week = 2023-12-25..2023-12-31",
                      "last year = 2023", "last Sunday = 2023-12-31"]
    assert [r.label() for r in resolve_relative("next month, tomorrow", date(2023, 12, 31))] == [
        "next month = January 2024", "tomorrow = 2024-01-01"]
    assert [r.label() for r in resolve_relative("two months ago", date(2024, 3, 31))] == [
        "two months ago = January 2024"]
    # Before year 1 or after 9999 there is no day: nothing is resolved, nothing raises.
    assert resolve_relative("see you tomorrow, next year", date(9999, 12, 31)) == []
    assert resolve_relative("yesterday, a year ago", date(1, 1, 1)) == []
    assert query_spans("what happened in May 0000 or on 0000-05-01") == []
    root = _workspace(tmp_path)
    (root / "memory" / "9999-12-31.md").write_text("See you tomorrow, next year.\n")
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        assert not index.index_workspace(root).problems
        assert index.search("what happened in May 0000", k=3) is not None
        out = MemoryTools(root, index).run("memory_search", {"query": "what happened in May 0000"})
        assert not out.is_error


class _Counting:
    """A compiled pattern whose matches are counted as they are read."""

    def __init__(self, pattern: object) -> None:
        self.pattern = pattern
        self.read = 0

    def finditer(self, text: str) -> Iterator[Any]:
        for match in self.pattern.finditer(text):  # type: ignore[attr-defined]
            self.read += 1
            yield match


def test_identifier_keys_read_no_more_matches_than_they_keep(monkeypatch) -> None:
    # Every appended message goes through this: a tool output of 100,000 paths must not be scanned whole.
    counting = _Counting(chunks_module.IDENTIFIER)
    monkeypatch.setattr(chunks_module, "IDENTIFIER", counting)
    keys = chunks_module.identifier_keys(" ".join(f"src/mod{n}.py" for n in range(100_000)))
    assert len(keys) == chunks_module.MAX_KEYS and counting.read == chunks_module.MAX_KEYS


def test_units_of_a_long_list_cost_linear_work(monkeypatch) -> None:
    calls = 0
    real = units_module.speaker_of

    def counted(line: str) -> str | None:
        nonlocal calls
        calls += 1
        return real(line)

    monkeypatch.setattr(units_module, "speaker_of", counted)
    lines = 96_000
    text = "\n".join(f"- item number {n} of the list" for n in range(lines))
    started = time.process_time()
    units = units_module.text_units(text)
    spent = time.process_time() - started
    assert len(units) == lines and calls <= 2 * lines  # each line's speaker read at most twice
    # CPU time, not wall time, with a wide margin both ways: linear work is about 1 s here; the list
    # membership tests that were there (quadratic) took about 40 s. Not a timing test: a bound on work.
    assert spent < 15


def test_a_long_question_keeps_the_short_name_it_quotes(tmp_path: Path) -> None:
    # Only the 16 longest words of a query were counted: a long question lost 'Rex' to its longer
    # words, and found every address but the pet.
    question = ("Among all people who live in the same state as the owner of the pet named 'Rex', who owns the most "
                "vehicles? If there's a tie, who has the most credit cards? If still tied, who has the highest "
                "total bank balance, counting every account?")
    root = _workspace(tmp_path)
    (root / "memory" / "counts.md").write_text("\n\n".join(  # the long words are common, 'Rex' is rare
        f"Account {n} of the owner named there: vehicles, credit cards, bank balance, in the same state."
        for n in range(40)))
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(root)
        hits = index.search(question, k=1, mode="bm25", context=False)
    assert hits and "name: Rex" in hits[0].text


def test_a_word_and_its_plural_share_a_stem() -> None:
    # `vehicles` lost its `es` and `vehicle` nothing: a line of vehicles never matched "vehicle".
    pairs = [("vehicle", "vehicles"), ("state", "states"), ("box", "boxes"), ("match", "matches"), ("city", "cities"),
             ("paint", "painted"), ("glass", "glasses"), ("price", "priced")]
    assert all(stem(a) == stem(b) for a, b in pairs), [(stem(a), stem(b)) for a, b in pairs]
    assert unit_text("a\n" * 200 + "vehicle_id: veh-0001", query_stems("how many vehicles"), 40)[1] == (201,)
