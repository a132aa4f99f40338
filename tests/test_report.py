"""`ctxwin report`: the HTML page rendered from real replays (`compare` and `retention` on real
sessions), its structure, that it loads nothing from anywhere, and that no transcript text can inject
markup into it. The browser test is in test_browser.py."""

from __future__ import annotations

import json
import re
import warnings
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import shared_path
from ctxwin.cli.main import app
from ctxwin.errors import InputError
from ctxwin.evaluation.compare import compare
from ctxwin.evaluation.probes import PROBE_TYPES
from ctxwin.evaluation.report import (
    CHART_H,
    HOVER_BANDS,
    MARGIN_T,
    MAX_POINTS,
    buckets,
    fmt_short,
    nice_step,
    render_report,
    report,
    timeline_svg,
    totals,
)
from ctxwin.evaluation.retention import retention
from ctxwin.messages import Message, Text, ToolCall, ToolResult, assign_ids
from ctxwin.tokens.registry import UnknownModelWarning
from ctxwin.transcripts.model import Transcript

EXAMPLE = Path(__file__).parents[1] / "src" / "ctxwin" / "examples" / "claude-code-session.jsonl"
SESSION = ("claude-code", "258c7280-ae70-4798-800f-63464d01a85d.jsonl")  # one real compaction, 152 calls
POLICIES = ["ctxwin", "claude-code", "masking", "raw", "recorded"]
PAYLOAD = '<script>alert("x")</script><img src=x onerror=alert(1)>'
# Every element the page may contain: anything else would be markup that came from data.
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "main", "header", "h1", "h2", "h3", "p", "code", "b", "em",
    "span", "nav", "a", "section", "details", "summary", "ul", "li", "div", "table", "thead", "tbody", "tr", "th",
    "td", "br", "figure", "figcaption", "svg", "line", "text", "polygon", "g", "path", "rect", "i",
    "footer", "script",
}
VOID = {"meta", "br", "line", "rect", "path", "polygon"}  # written without a closing tag (or self-closed)

runner = CliRunner()


class Page(HTMLParser):
    """The page parsed: every tag with its attributes, the text, and the nesting checked as it goes."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)
        else:
            self.text.append(data)

    @property
    def plain(self) -> str:
        return " ".join(self.text)

    def with_class(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


def assert_safe(page: Page) -> None:
    """Only the page's own elements, no event handlers, nothing that loads from anywhere."""
    assert not page.errors, page.errors[:5]
    assert not page.stack, page.stack
    assert {t for t, _ in page.tags} <= ALLOWED_TAGS, {t for t, _ in page.tags} - ALLOWED_TAGS
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            assert name not in ("src", "srcset", "action", "formaction", "background", "xlink:href"), (tag, name)
            if name == "href":
                assert value and value.startswith("#"), value
            assert "javascript:" not in (value or "").lower(), (tag, name, value)
            assert not re.search(r"https?:|//", value or "") or name == "content", (tag, name, value)
    scripts = [a for t, a in page.tags if t == "script"]
    assert scripts == [{"type": "application/json", "id": "ctxwin-data"}]


@pytest.fixture(scope="module")
def shared() -> tuple[dict[str, Any], dict[str, Any]]:
    path = str(shared_path(*SESSION))
    comparison = compare(path, POLICIES).to_dict()
    scored = retention([path], ["ctxwin", "claude-code", "recorded"]).to_dict()
    return comparison, scored


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return compare(str(EXAMPLE), ["ctxwin", "pi", "masking", "raw"]).to_dict()


# --------------------------------------------------------------------------------------------------
# The page from real replays


def test_page_from_a_real_session_has_every_part(shared: tuple[dict, dict]) -> None:
    comparison, scored = shared
    html_text = render_report([comparison], scored, title="report of 258c7280")
    page = Page(html_text)
    assert_safe(page)
    rows = comparison["policies"]
    assert list(rows) == POLICIES
    # One timeline per policy, one table row per policy, and every exact token figure in the text.
    assert len(page.with_class("svg", "timeline")) == len(rows)
    for name, row in rows.items():
        assert name in page.text  # the row header's own text node
        assert f"{row['cumulative_input_tokens']:,}" in page.plain
        assert f"{row['peak_tokens']:,}" in page.plain
    # A compaction marker for every call that compacted, and prefix-break ticks for masking.
    compacting_calls = sum(1 for row in rows.values() for call in row["timeline"]
                           if any(e["stage"] == "compaction" and e["action"] != "failed" for e in call["events"]))
    assert compacting_calls >= 2  # claude-code's own and the recorded one
    assert len(page.with_class("g", "compaction")) == compacting_calls
    assert page.with_class("g", "break")
    # The best value of a column is highlighted, and only it.
    cheapest = min(rows, key=lambda n: rows[n]["cumulative_input_tokens"])
    assert f"{rows[cheapest]['cumulative_input_tokens']:,}" in _best_cells(html_text)
    # Retention: one column per probe type, a row per policy, the points' details, the note.
    for kind in PROBE_TYPES:
        assert kind.replace("_", " ") in page.plain
    assert len(page.with_class("details", "point")) == len(scored["sessions"])
    assert "How to read this" in page.plain
    # The embedded numbers are the comparison's, minus timelines and wall-clock latencies.
    data = json.loads(page.scripts[0])
    embedded = data["sessions"][0]["policies"]
    assert {n: r["cumulative_input_tokens"] for n, r in embedded.items()} == \
        {n: r["cumulative_input_tokens"] for n, r in rows.items()}
    assert not any("timeline" in r or "latency_ms" in r for r in embedded.values())
    assert data["retention_summary"] == scored["summary"]


def _best_cells(html_text: str) -> list[str]:
    return re.findall(r'<td class="[^"]*\bbest\b[^"]*"[^>]*>([^<]*)</td>', html_text)


def test_the_page_is_self_contained(shared: tuple[dict, dict], example: dict) -> None:
    comparison, scored = shared
    html_text = render_report([comparison, example], scored)
    assert_safe(Page(html_text))
    lowered = html_text.lower()
    for needle in ("<link", "@import", "url(", "<img", "<iframe", "<object", "<embed", "src=", "@font-face"):
        assert needle not in lowered, needle
    # Any address in the page is text (a transcript's URL, say), never inside a tag.
    for tag in re.findall(r"<[^>]+>", html_text):
        assert "http://" not in tag and "https://" not in tag, tag
    assert "Content-Security-Policy" in html_text and "default-src 'none'" in html_text


def test_the_same_data_gives_the_same_bytes(shared: tuple[dict, dict]) -> None:
    comparison, scored = shared
    assert render_report([comparison], scored) == render_report([comparison], scored)


def test_several_sessions_get_totals_and_links(shared: tuple[dict, dict], example: dict) -> None:
    comparison, _ = shared
    both = [comparison, example]
    page = Page(render_report(both))
    summed = totals(both)
    for name, row in summed.items():
        expected = sum(s["policies"][name]["cumulative_input_tokens"] for s in both if name in s["policies"])
        assert row["cumulative_input_tokens"] == expected
        assert row["sessions"] == sum(name in s["policies"] for s in both)
        assert f"{expected:,}" in page.plain
    links = [a["href"] for t, a in page.tags if t == "a"]
    assert {"#all-sessions", "#session-1", "#session-2"} <= set(links)
    ids = {a.get("id") for _, a in page.tags}
    assert all(link[1:] in ids for link in links)  # every link lands somewhere
    assert len(page.with_class("svg", "timeline")) == sum(len(s["policies"]) for s in both)


def test_pooled_prefix_kept_weighs_each_session_by_its_calls(shared: tuple[dict, dict], example: dict) -> None:
    comparison, _ = shared
    row_a, row_b = comparison["policies"]["ctxwin"], example["policies"]["ctxwin"]
    later = (row_a["calls"] - 1, row_b["calls"] - 1)
    expected = (row_a["prefix_kept_fraction"] * later[0] + row_b["prefix_kept_fraction"] * later[1]) / sum(later)
    assert totals([comparison, example])["ctxwin"]["prefix_kept_fraction"] == pytest.approx(expected, abs=1e-4)


# --------------------------------------------------------------------------------------------------
# Nothing from a transcript can become markup


def _hostile_transcript() -> Transcript:
    """A session whose every string carries markup: user turns, commands, failing outputs, the model
    name and the file name."""
    messages = []
    for i in range(30):
        messages.append(Message("user", (Text(f"Step {i}: keep {PAYLOAD} intact and run check {i:04d}"),)))
        call = ToolCall(f"c{i}", "shell", {"command": f"echo '{PAYLOAD}' {i}"})
        messages.append(Message("assistant", (Text(f"running {PAYLOAD}"), call)))
        body = "\n".join(f"line {j} of output {PAYLOAD} " + "x" * 40 for j in range(200))
        result = ToolResult(f"c{i}", (Text(f"error: {PAYLOAD} failed at {i}\n{body}"),), is_error=True, name="shell")
        messages.append(Message("tool", (result,)))
        messages.append(Message("assistant", (Text(f"noted {PAYLOAD}"),)))
    return Transcript("openai", assign_ids(messages), model=PAYLOAD, source=f"/tmp/{PAYLOAD}/session.jsonl")


@pytest.mark.filterwarnings("ignore::ctxwin.tokens.registry.UnknownModelWarning")
def test_transcript_text_cannot_inject_markup(tmp_path: Path) -> None:
    policy = tmp_path / f"{PAYLOAD.replace('/', '')}.toml"
    policy.write_text('base = "truncate"\nname = "<b>bold</b>"\n', "utf-8")
    transcript = _hostile_transcript()
    names = ["ctxwin", "truncate", str(policy)]
    # A small window, so that truncate loses facts and the page lists them (probe texts carry the payload).
    comparison = compare(transcript, names, window=60_000).to_dict()
    scored = retention([transcript], names, window=60_000).to_dict()
    assert any(view["missing"] for point in scored["sessions"] for view in point["policies"].values())
    html_text = render_report([comparison], scored, title=PAYLOAD, intro=PAYLOAD, command=PAYLOAD)
    page = Page(html_text)
    assert_safe(page)
    assert PAYLOAD not in html_text
    assert "<b>bold" not in html_text
    # The payload reached the page, as text: in the title, the model name, the policy name, lost probes.
    assert page.plain.count(PAYLOAD) >= 5
    assert any(f"error: {PAYLOAD} failed at" in li for li in page.text)
    assert "</" not in page.scripts[0] and "<" not in page.scripts[0]
    assert json.loads(page.scripts[0])["sessions"][0]["model"] == PAYLOAD


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(label=st.text(min_size=1, max_size=40))
def test_any_label_stays_text(example: dict, label: str) -> None:
    """Real numbers under arbitrary names: the page parses to the same elements and the name comes
    back as the text it was."""
    renamed = {**example, "file": label, "model": label,
               "policies": {f"{label}{i}": row for i, row in enumerate(example["policies"].values())}}
    page = Page(render_report([renamed], title=label, intro=label))
    assert_safe(page)
    assert all(f"{label}{i}" in page.plain for i in range(len(renamed["policies"])))


# --------------------------------------------------------------------------------------------------
# Charts


def test_long_timelines_are_bucketed_but_keep_their_peak() -> None:
    calls = 5 * MAX_POINTS
    timeline = [{"call": i, "tokens": 1000 + i, "cached_tokens": 900 + i,
                 "categories": {"system": 100, "summary": 0, "tool_results": 600 + i, "messages": 300},
                 "events": []} for i in range(calls)]
    timeline[1234]["tokens"] = 90_000
    timeline[1234]["categories"]["tool_results"] = 89_600
    svg = timeline_svg("p", timeline, 100_000, 200_000)
    polygon = re.search(r'class="layer layer-tool_results"[^>]*points="([^"]*)"', svg)
    assert polygon is not None
    points = polygon.group(1).split()
    assert len(points) == 2 * MAX_POINTS
    top = min(float(p.split(",")[1]) for p in points)
    assert top == pytest.approx(MARGIN_T + CHART_H * (1 - 89_700 / 100_000), abs=0.1)  # the spike survives
    assert svg.count('class="hover"') == HOVER_BANDS


def test_an_empty_timeline_says_so() -> None:
    assert "no model calls" in timeline_svg("p", [], 1000, None)


def test_one_call_draws_bars() -> None:
    svg = timeline_svg("p", [{"tokens": 500, "cached_tokens": 0, "categories": {"messages": 500}, "events": []}],
                       1000, None)
    assert 'class="layer layer-messages"' in svg and 'class="cache first"' in svg


@given(top=st.floats(min_value=1, max_value=1e12))
def test_nice_step_gives_few_round_ticks(top: float) -> None:
    step = nice_step(top)
    mantissa = step / 10 ** int(f"{step:e}".split("e")[1])
    assert round(mantissa, 6) in (1, 2, 2.5, 5, 10)
    assert 2 <= top / step <= 8 or top < 4


@given(n=st.integers(0, 5000), limit=st.integers(1, 700))
def test_buckets_cover_every_call_once(n: int, limit: int) -> None:
    spans = buckets(n, limit)
    assert len(spans) == min(n, limit)
    covered = [i for a, b in spans for i in range(a, b)]
    assert covered == list(range(n))


def test_short_numbers() -> None:
    assert [fmt_short(v) for v in (0, 950, 1000, 1500, 200_000, 1_234_567, 45_600_000)] == \
        ["0", "950", "1K", "1.5K", "200K", "1.23M", "45.6M"]


# --------------------------------------------------------------------------------------------------
# The command


def test_report_command_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(EXAMPLE), "-o", str(out), "--json", "-p", "ctxwin,raw,masking"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["path"] == str(out) and data["bytes"] == out.stat().st_size
    assert data["policies"] == ["ctxwin", "raw", "masking"]
    assert data["retention_points"] == 2  # no real compaction: synthetic points at 50 % and 80 %
    page = Page(out.read_text("utf-8"))
    assert_safe(page)
    for name, row in data["comparison"][0]["policies"].items():
        assert f"{row['cumulative_input_tokens']:,}" in page.plain, name
    assert f"ctxwin report {EXAMPLE} -o {out} --policy ctxwin,raw,masking" in page.plain  # how it was made


def test_report_command_defaults_skip_recorded_without_usage(tmp_path: Path) -> None:
    transcript = _hostile_transcript()
    assert not transcript.usage
    session = tmp_path / "chat.json"
    session.write_text(json.dumps([{"role": "user", "content": "hi there, list the files"},
                                   {"role": "assistant", "content": "sure"}]), "utf-8")
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(session), "-o", str(out), "--json", "--no-retention"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert "recorded" not in data["policies"] and "ctxwin" in data["policies"]
    assert data["retention_points"] == 0


def test_report_command_errors_are_messages(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "no such file" in result.stderr and "Traceback" not in result.output
    result = runner.invoke(app, ["report", str(EXAMPLE), "-o", str(tmp_path), "--no-retention", "-p", "raw"])
    assert result.exit_code == 2
    assert "is a folder" in " ".join(result.stderr.split())
    result = runner.invoke(app, ["report", str(EXAMPLE), "-o", str(tmp_path / "no" / "r.html")])
    assert result.exit_code == 2
    assert "does not exist" in " ".join(result.stderr.split())
    result = runner.invoke(app, ["report", str(EXAMPLE), "-o", str(tmp_path / "r.html"), "-p", "nosuch"])
    assert result.exit_code == 2
    assert "unknown policy" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_report_library_call_records_what_it_did(tmp_path: Path) -> None:
    progress: Counter[str] = Counter()
    result = report([EXAMPLE], tmp_path / "r.html", policies=["ctxwin", "raw"],
                    progress=lambda task, done, total: progress.update([task]))
    assert result.sessions == [str(EXAMPLE)]
    assert set(result.seconds) == {"load", "compare", "retention", "render", "total"}
    assert progress["ctxwin"] and progress["retention"]
    with pytest.raises(InputError):
        report([], tmp_path / "x.html")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownModelWarning)
        render_report([result.comparisons[0]])  # rendering reads no registry
