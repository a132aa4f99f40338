"""`ctxwin report`: one self-contained HTML file a person tuning an agent can open anywhere.

The page is rendered from plain data: the `to_dict()` of `ctxwin.evaluation.compare` (one per
session) and of `ctxwin.evaluation.retention`. Charts are inline SVG drawn here, styles are inline
CSS, and nothing is loaded at view time (no script, font, image or stylesheet from anywhere). Every
string that can come from a transcript or from the user (paths, model names, policy names, event
reasons, probe texts) goes through `esc`; numbers are formatted here. The same input gives the same
bytes (no clock, no randomness), so a report can be diffed.

(Long on purpose: one self-contained page; most of the length is the HTML and the SVG plots it writes.)
"""

from __future__ import annotations

import html
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

import ctxwin
from ctxwin.errors import InputError
from ctxwin.evaluation.compare import DEFAULT_POLICIES, RECORDED, compare
from ctxwin.evaluation.retention import retention as score_retention
from ctxwin.pipeline.events import kind_of
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.model import Transcript

CATEGORIES: tuple[tuple[str, str], ...] = (
    ("system", "system prompt + tools"),
    ("summary", "summary"),
    ("tool_results", "tool results"),
    ("messages", "messages"),
)
"""Timeline layers, bottom to top, with their legend labels."""
COLORS = {"system": "#94a3b8", "summary": "#8b5cf6", "tool_results": "#f59e0b", "messages": "#3b82f6"}
COMPACTION_COLOR = "#dc2626"  # compaction markers
BREAK_COLOR = "#ea580c"  # other prefix-breaking events
CHART_W = 560  # timeline width in SVG units (it scales with the page)
CHART_H = 190  # timeline plot height
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 52, 12, 14, 22
CACHE_STRIP_H = 8  # height of the per-call cache strip under each timeline
MAX_POINTS = 600  # points per timeline layer at most; longer sessions are bucketed (max of each bucket)
HOVER_BANDS = 120  # hover targets (native tooltips) per timeline at most
WINDOW_IN_SCALE = 1.5  # the window line is drawn when the largest request is at least 1/1.5 of it
MISSING_SHOWN = 6  # missing probes listed per policy and type in the retention details
PROBE_SHOWN_CHARS = 240  # a listed probe is cut to this many characters (`ctxwin eval retention --json` has it whole)
TEMPLATE = "report_template.html"
EMBED_SKIP = ("timeline", "latency_ms")  # left out of the embedded JSON: bulky, or wall-clock (not reproducible)

# Which way is better for each compared number: -1 lower, +1 higher.
BETTER: dict[str, int] = {
    "cumulative_input_tokens": -1,
    "peak_tokens": -1,
    "prefix_kept_fraction": 1,
    "cost_cached_usd": -1,
    "cost_uncached_usd": -1,
}


def esc(value: Any) -> str:
    """Text for HTML and SVG content and attribute values (quotes escaped too)."""
    return html.escape("" if value is None else str(value), quote=True)


# --------------------------------------------------------------------------------------------------
# Number formatting (the page shows every exact token figure with thousands separators)


def fmt_int(value: Any) -> str:
    return f"{int(value):,}" if isinstance(value, int | float) and not isinstance(value, bool) else "–"


def fmt_short(value: float) -> str:
    """1234567 -> 1.23M, 45600 -> 45.6K (chart labels)."""
    value = float(value)
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= limit:
            number = value / limit
            text = f"{number:.2f}" if number < 10 else f"{number:.1f}" if number < 100 else f"{number:.0f}"
            if "." in text:
                text = text.rstrip("0").rstrip(".")
            return text + suffix
    return f"{value:.0f}"


def fmt_usd(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "–"
    return f"${value:,.2f}" if value >= 1 else f"${value:.3f}"


def fmt_pct(value: Any, digits: int = 0) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "–"
    return f"{value * 100:.{digits}f}%"


# --------------------------------------------------------------------------------------------------
# Charts


def nice_step(top: float, ticks: int = 4) -> float:
    """A round tick step (1, 2, 2.5 or 5 x 10^k) giving about `ticks` ticks up to `top`."""
    if top <= 0:
        return 1.0
    raw = top / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def buckets(n: int, limit: int) -> list[tuple[int, int]]:
    """Split `range(n)` into at most `limit` consecutive [start, end) spans of near-equal size."""
    if n <= limit:
        return [(i, i + 1) for i in range(n)]
    size = n / limit
    return [(round(k * size), round((k + 1) * size)) for k in range(limit)]


def _events(call: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A call's events as dicts (a timeline may carry dicts or bare stage names)."""
    return [e if isinstance(e, Mapping) else {"stage": str(e)} for e in call.get("events") or ()]


def _layers(timeline: Sequence[Mapping[str, Any]]) -> list[dict[str, int]]:
    """Per call, the category tokens scaled so they sum to the call's tokens (categories are
    calibrated separately and may be off by rounding)."""
    out = []
    for call in timeline:
        cats = {key: max(0, int(call.get("categories", {}).get(key, 0) or 0)) for key, _ in CATEGORIES}
        total = sum(cats.values())
        tokens = int(call.get("tokens", total) or 0)
        if total and total != tokens:
            cats = {k: round(v * tokens / total) for k, v in cats.items()}
        elif not total:
            cats["messages"] = tokens
        out.append(cats)
    return out


@dataclass(frozen=True, slots=True)
class Scale:
    """Maps call numbers and token counts to SVG coordinates."""

    calls: int
    top: float

    def x(self, call: float) -> float:
        width = CHART_W - MARGIN_L - MARGIN_R
        return MARGIN_L + (width * call / max(self.calls - 1, 1))

    def y(self, tokens: float) -> float:
        return MARGIN_T + CHART_H * (1 - tokens / self.top)


def _f(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def timeline_svg(name: str, timeline: Sequence[Mapping[str, Any]], top: float, window: int | None,
                 budget: int | None = None) -> str:
    """A stacked-area token timeline for one policy: categories per call, the window line,
    compaction markers, ticks for other prefix-breaking events, and a cache strip underneath."""
    n = len(timeline)
    height = MARGIN_T + CHART_H + MARGIN_B + CACHE_STRIP_H + 6
    label = f"token timeline of policy {name}: {n} calls"
    parts = [f'<svg class="timeline" viewBox="0 0 {CHART_W} {height}" role="img" aria-label="{esc(label)}" '
             f'preserveAspectRatio="xMidYMid meet">']
    if not n:
        parts.append(f'<text x="{CHART_W / 2}" y="{height / 2}" class="empty" text-anchor="middle">no model calls'
                     "</text></svg>")
        return "".join(parts)
    scale = Scale(n, top)
    step = nice_step(top)
    tick = 0.0
    while tick <= top + 1e-9:
        y = scale.y(tick)
        parts.append(f'<line class="grid" x1="{MARGIN_L}" x2="{CHART_W - MARGIN_R}" y1="{_f(y)}" y2="{_f(y)}"/>'
                     f'<text class="axis" x="{MARGIN_L - 6}" y="{_f(y + 3.5)}" text-anchor="end">'
                     f"{esc(fmt_short(tick))}</text>")
        tick += step

    layers = _layers(timeline)
    spans = buckets(n, MAX_POINTS)
    # Per bucket: the call with the most tokens stands for it, so peaks are never smoothed away.
    reps = [max(range(a, b), key=lambda i: int(timeline[i].get("tokens", 0) or 0)) for a, b in spans]
    xs = [scale.x((a + b - 1) / 2) for a, b in spans]
    base = [0.0] * len(reps)
    for key, legend in CATEGORIES:
        upper = [base[k] + layers[i][key] for k, i in enumerate(reps)]
        if any(u > b for u, b in zip(upper, base, strict=True)):
            top_pts = " ".join(f"{_f(x)},{_f(scale.y(u))}" for x, u in zip(xs, upper, strict=True))
            bottom_pts = " ".join(f"{_f(x)},{_f(scale.y(b))}" for x, b in reversed(list(zip(xs, base, strict=True))))
            if len(xs) == 1:  # one call: a bar, not a degenerate polygon
                left, right = MARGIN_L, CHART_W - MARGIN_R
                top_pts = f"{left},{_f(scale.y(upper[0]))} {right},{_f(scale.y(upper[0]))}"
                bottom_pts = f"{right},{_f(scale.y(base[0]))} {left},{_f(scale.y(base[0]))}"
            parts.append(f'<polygon class="layer layer-{esc(key)}" fill="{COLORS[key]}" '
                         f'points="{top_pts} {bottom_pts}"><title>{esc(legend)}</title></polygon>')
        base = upper

    if window:
        for value, cls, text in ((window, "window", f"window {fmt_short(window)}"),
                                 (budget, "budget", f"budget {fmt_short(budget or 0)}")):
            if value and value <= top:
                y = scale.y(value)
                parts.append(f'<line class="{cls}" x1="{MARGIN_L}" x2="{CHART_W - MARGIN_R}" y1="{_f(y)}" '
                             f'y2="{_f(y)}"/>')
                if cls == "window":
                    parts.append(f'<text class="limit" x="{CHART_W - MARGIN_R - 4}" y="{_f(y - 4)}" '
                                 f'text-anchor="end">{esc(text)}</text>')

    bottom = MARGIN_T + CHART_H
    for i, call in enumerate(timeline):
        events = _events(call)
        x = scale.x(i)
        compactions = [e for e in events if kind_of(e).is_compaction]
        breaks = [e for e in events if e.get("breaks_prefix") and not kind_of(e).is_compaction]
        if compactions:
            e = compactions[0]
            tip = (f"call {i + 1}: compaction ({e.get('action', '')}) "
                   f"{fmt_int(e.get('tokens_before'))} → {fmt_int(e.get('tokens_after'))} tokens"
                   + (f"; {e.get('reason')}" if e.get("reason") else ""))
            parts.append(f'<g class="marker compaction"><title>{esc(tip)}</title>'
                         f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{MARGIN_T}" y2="{bottom}"/>'
                         f'<path d="M{_f(x - 5)},{MARGIN_T - 8} L{_f(x + 5)},{MARGIN_T - 8} '
                         f'L{_f(x)},{MARGIN_T - 1} Z"/>'
                         "</g>")
        elif breaks:
            broken_by = ", ".join(sorted({str(e.get("stage", "?")) for e in breaks}))
            parts.append(f'<g class="marker break"><title>{esc(f"call {i + 1}: prefix broken by {broken_by}")}</title>'
                         f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{bottom - 7}" y2="{bottom}"/></g>')

    # The cache strip: the share of each call a prompt cache could reuse, run-length merged.
    strip_y = bottom + 4
    parts.append(f'<rect class="strip-bg" x="{MARGIN_L}" y="{strip_y}" width="{CHART_W - MARGIN_L - MARGIN_R}" '
                 f'height="{CACHE_STRIP_H}"/>')
    runs: list[tuple[int, int, str]] = []
    for i, call in enumerate(timeline):
        tokens = int(call.get("tokens", 0) or 0)
        cached = int(call.get("cached_tokens", 0) or 0)
        level = _cache_level(cached / tokens if tokens else 0.0, i)
        if runs and runs[-1][2] == level:
            runs[-1] = (runs[-1][0], i, level)
        else:
            runs.append((i, i, level))
    half = (scale.x(1) - scale.x(0)) / 2 if n > 1 else (CHART_W - MARGIN_L - MARGIN_R) / 2
    for first, last, level in runs:
        x0 = max(MARGIN_L, scale.x(first) - half)
        x1 = min(CHART_W - MARGIN_R, scale.x(last) + half)
        parts.append(f'<rect class="cache {level}" x="{_f(x0)}" y="{strip_y}" width="{_f(max(x1 - x0, 0.5))}" '
                     f'height="{CACHE_STRIP_H}"/>')
    parts.append(f'<text class="axis" x="{MARGIN_L - 6}" y="{strip_y + CACHE_STRIP_H - 1}" text-anchor="end">'
                 "cache</text>")

    for k in range(0, 5):
        at = round(k * (n - 1) / 4) if n > 1 else 0
        parts.append(f'<text class="axis" x="{_f(scale.x(at))}" y="{height - 1}" text-anchor="middle">'
                     f"{at + 1}</text>")
        if n == 1:
            break

    for a, b in buckets(n, HOVER_BANDS):
        i = max(range(a, b), key=lambda j: int(timeline[j].get("tokens", 0) or 0))
        call = timeline[i]
        cats = layers[i]
        tip = (f"call {i + 1}: {fmt_int(call.get('tokens'))} tokens sent, {fmt_int(call.get('cached_tokens'))} "
               "reusable from the cache\n" + "\n".join(f"{legend}: {fmt_int(cats[key])}" for key, legend in CATEGORIES))
        stages = sorted({str(e.get("stage", "?")) for e in _events(call)})
        if stages:
            tip += "\nevents: " + ", ".join(stages)
        x0 = scale.x(a) - half
        x1 = scale.x(b - 1) + half
        parts.append(f'<rect class="hover" x="{_f(max(x0, MARGIN_L))}" y="{MARGIN_T}" '
                     f'width="{_f(max(min(x1, CHART_W - MARGIN_R) - max(x0, MARGIN_L), 0.5))}" height="{CHART_H}">'
                     f"<title>{esc(tip)}</title></rect>")
    parts.append("</svg>")
    return "".join(parts)


def _cache_level(share: float, index: int) -> str:
    if index == 0:
        return "first"
    if share >= 0.9:
        return "hit"
    if share >= 0.5:
        return "partial"
    return "miss"


# --------------------------------------------------------------------------------------------------
# Tables


def _best(rows: Mapping[str, Mapping[str, Any]], key: str) -> set[str]:
    """Names of the rows holding the best value of `key` (ties all win)."""
    direction = BETTER[key]
    values = {n: v for n, r in rows.items() if isinstance(v := r.get(key), int | float)}
    if len(values) < 2:
        return set()
    best = (min if direction < 0 else max)(values.values())
    return {n for n, v in values.items() if v == best}


def _cell(text: str, *, best: bool = False, bad: bool = False, title: str | None = None, cls: str = "num") -> str:
    classes = " ".join(c for c in (cls, "best" if best else "", "bad" if bad else "") if c)
    tip = f' title="{esc(title)}"' if title else ""
    return f'<td class="{classes}"{tip}>{text}</td>'


def comparison_table(data: Mapping[str, Any]) -> str:
    rows: Mapping[str, Mapping[str, Any]] = data.get("policies", {})
    best = {key: _best(rows, key) for key in BETTER}
    raw = rows.get("raw", {}).get("cumulative_input_tokens")
    head = ("policy", "calls", "input tokens, all calls", "vs raw", "peak request", "compactions", "prefix kept",
            "cost, cached", "cost, uncached", "valid", "over budget", "events")
    out = ['<div class="table-wrap"><table class="compare"><thead><tr>',
           "".join(f'<th scope="col">{esc(h)}</th>' for h in head), "</tr></thead><tbody>"]
    for name, row in rows.items():
        cumulative = row.get("cumulative_input_tokens")
        share = row.get("share_of_raw_tokens")
        if share is None and isinstance(raw, int | float) and raw and isinstance(cumulative, int | float):
            share = cumulative / raw
        events = row.get("events") or {}
        event_text = ", ".join(f"{esc(stage)} {fmt_int(count)}" for stage, count in events.items()) or "–"
        valid = row.get("valid")
        over = row.get("over_budget_calls") or 0
        out.append(f'<tr class="{"ours" if name == "ctxwin" else ""}"><th scope="row">{esc(name)}</th>')
        out.append(_cell(fmt_int(row.get("calls"))))
        out.append(_cell(fmt_int(cumulative), best=name in best["cumulative_input_tokens"]))
        out.append(_cell(fmt_pct(share) if share is not None else "–"))
        out.append(_cell(fmt_int(row.get("peak_tokens")), best=name in best["peak_tokens"]))
        out.append(_cell(fmt_int(row.get("compactions"))))
        out.append(_cell(fmt_pct(row.get("prefix_kept_fraction")), best=name in best["prefix_kept_fraction"]))
        out.append(_cell(fmt_usd(row.get("cost_cached_usd")), best=name in best["cost_cached_usd"]))
        out.append(_cell(fmt_usd(row.get("cost_uncached_usd")), best=name in best["cost_uncached_usd"]))
        out.append(_cell("yes" if valid else "no", bad=valid is False, cls="flag"))
        out.append(_cell(fmt_int(over), bad=bool(over), cls="num"))
        out.append(_cell(event_text, cls="events"))
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def totals(sessions: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per policy, summed over the sessions that ran it: calls, tokens, costs, compactions, the pooled
    share of calls that kept the prefix, and whether every request was valid and within budget."""
    out: dict[str, dict[str, Any]] = {}
    for session in sessions:
        for name, row in session.get("policies", {}).items():
            t = out.setdefault(name, {"sessions": 0, "calls": 0, "cumulative_input_tokens": 0, "peak_tokens": 0,
                                      "compactions": 0, "cost_cached_usd": 0.0, "cost_uncached_usd": 0.0,
                                      "valid": True, "over_budget_calls": 0, "events": {}})
            t["sessions"] += 1
            for key in ("calls", "cumulative_input_tokens", "compactions", "over_budget_calls"):
                t[key] += int(row.get(key) or 0)
            for key in ("cost_cached_usd", "cost_uncached_usd"):
                t[key] += float(row.get(key) or 0.0)
            t["peak_tokens"] = max(t["peak_tokens"], int(row.get("peak_tokens") or 0))
            # Prefix kept is a share of calls after the first: pooled, weighted by those calls.
            later = max(int(row.get("calls") or 0) - 1, 0)
            t["_kept"] = t.get("_kept", 0.0) + float(row.get("prefix_kept_fraction") or 0.0) * later
            t["_later"] = t.get("_later", 0) + later
            t["valid"] = t["valid"] and row.get("valid") is not False
            for stage, count in (row.get("events") or {}).items():
                t["events"][stage] = t["events"].get(stage, 0) + int(count)
    for row in out.values():
        later = row.pop("_later", 0)
        kept = row.pop("_kept", 0.0)
        row["prefix_kept_fraction"] = round(kept / later, 4) if later else None
        row["cost_cached_usd"] = round(row["cost_cached_usd"], 4)
        row["cost_uncached_usd"] = round(row["cost_uncached_usd"], 4)
    return out


def retention_table(summary: Mapping[str, Mapping[str, Any]], probe_types: Sequence[str]) -> str:
    """Recall per policy and probe type as bars coloured by level; the smallest view highlighted."""
    policies = list(summary)
    views = {p: v for p in policies if isinstance(v := summary[p].get("view_tokens"), int)}
    smallest = min(views.values(), default=None)
    out = ['<div class="table-wrap"><table class="retention"><thead><tr><th scope="col">policy</th>',
           "".join(f'<th scope="col">{esc(k.replace("_", " "))}</th>' for k in probe_types),
           '<th scope="col">view tokens</th><th scope="col">points</th></tr></thead><tbody>']
    for name in policies:
        row = summary[name]
        out.append(f'<tr class="{"ours" if name == "ctxwin" else ""}"><th scope="row">{esc(name)}</th>')
        for kind in probe_types:
            value = row.get(kind)
            if not isinstance(value, int | float):
                out.append('<td class="bar none">–</td>')
                continue
            width = max(0.0, min(100.0, value * 100))
            by_ref = (row.get("recoverable_by_ref") or {}).get(kind)
            more = (f' <span class="muted" title="recoverable by ref">/ {fmt_pct(by_ref)}</span>'
                    if isinstance(by_ref, int | float) and by_ref > value else "")
            out.append(f'<td class="bar {recall_level(value)}"><div class="meter">'
                       f'<span style="width:{width:.1f}%"></span></div><span class="pct">{fmt_pct(value)}</span>'
                       f"{more}</td>")
        view = row.get("view_tokens")
        out.append(_cell(fmt_int(view), best=len(views) > 1 and view == smallest))
        out.append(_cell(fmt_int(row.get("points"))))
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _clip(text: str) -> str:
    return text if len(text) <= PROBE_SHOWN_CHARS else text[: PROBE_SHOWN_CHARS - 1] + "…"


def recall_level(value: float) -> str:
    """A recall's colour class: all kept, most kept, much lost."""
    return "full" if value >= 0.999 else "good" if value >= 0.8 else "fair" if value >= 0.5 else "poor"


def retention_points(sessions: Sequence[Mapping[str, Any]], probe_types: Sequence[str]) -> str:
    """Per compaction point: probes by type, each policy's recall and view size, and what it lost."""
    out = []
    for point in sessions:
        counts = point.get("probes") or {}
        title = (f"{Path(str(point.get('file') or 'session')).name} · {point.get('point', '')} · "
                 f"history {fmt_int(point.get('history_tokens'))} tokens")
        out.append(f'<details class="point"><summary>{esc(title)}</summary>')
        recorded_next = point.get("recorded_next_call_tokens")
        if recorded_next:
            out.append(f'<p class="muted">The real harness\'s first call after its compaction was '
                       f"{fmt_int(recorded_next)} tokens.</p>")
        out.append('<div class="table-wrap"><table class="retention small"><thead><tr><th scope="col">policy</th>')
        out.append("".join(f'<th scope="col">{esc(k.replace("_", " "))}<br><span class="muted">'
                           f"{fmt_int(counts.get(k, 0))} probes</span></th>" for k in probe_types))
        out.append('<th scope="col">view tokens</th><th scope="col">compression</th></tr></thead><tbody>')
        for name, view in (point.get("policies") or {}).items():
            recall = view.get("recall") or {}
            by_ref = view.get("recall_recoverable_by_ref") or {}
            out.append(f"<tr><th scope=\"row\">{esc(name)}</th>")
            for kind in probe_types:
                value, more = recall.get(kind), by_ref.get(kind)
                text = fmt_pct(value) if isinstance(value, int | float) else "–"
                if isinstance(value, int | float) and isinstance(more, int | float) and more > value:
                    text += f" / {fmt_pct(more)}"
                out.append(_cell(text))
            ratio = view.get("compression_ratio")
            out.append(_cell(fmt_int(view.get("view_tokens"))))
            out.append(_cell(f"{ratio:.1f}×" if isinstance(ratio, int | float) else "–"))
            out.append("</tr>")
        out.append("</tbody></table></div>")
        lost = []
        for name, view in (point.get("policies") or {}).items():
            missing = view.get("missing") or {}
            items = [(kind, text) for kind in probe_types for text in list(missing.get(kind) or ())[:MISSING_SHOWN]]
            if items:
                entries = "".join(f"<li><span class=\"kind\">{esc(kind.replace('_', ' '))}</span> "
                                  f"<code>{esc(_clip(str(text)))}</code></li>" for kind, text in items)
                lost.append(f"<details class=\"lost\"><summary>{esc(name)}: {len(items)} probes shown as lost"
                            f"</summary><ul>{entries}</ul></details>")
        if lost:
            out.append('<div class="lost-list">' + "".join(lost) + "</div>")
        out.append("</details>")
    return "".join(out)


# --------------------------------------------------------------------------------------------------
# The page


def _legend() -> str:
    items = "".join(f'<span class="key"><i style="background:{COLORS[key]}"></i>{esc(label)}</span>'
                    for key, label in CATEGORIES)
    items += (f'<span class="key"><i class="line" style="background:{COMPACTION_COLOR}"></i>compaction</span>'
              f'<span class="key"><i class="tick" style="background:{BREAK_COLOR}"></i>other prefix break '
              "(mask, prune, fit…)</span>"
              '<span class="key"><i class="dash"></i>model window</span>'
              '<span class="key"><i class="cache hit"></i><i class="cache partial"></i><i class="cache miss"></i>'
              "cache strip: reusable share of each call</span>")
    return f'<div class="legend">{items}</div>'


def session_section(data: Mapping[str, Any], number: int) -> str:
    rows: Mapping[str, Mapping[str, Any]] = data.get("policies", {})
    file = str(data.get("file") or f"session {number}")
    window = data.get("window")
    meta = [f"format {esc(data.get('format'))}" if data.get("format") else "",
            f"model <b>{esc(data.get('model') or 'unknown')}</b>",
            f"window {fmt_int(window)} tokens" if window else "",
            f"fixed overhead {fmt_int(data.get('overhead_tokens'))} tokens per call"
            if data.get("overhead_tokens") else "",
            f"{fmt_int(max((r.get('calls') or 0 for r in rows.values()), default=0))} model calls"]
    pricing = data.get("pricing") or {}
    if pricing:
        meta.append(f"priced as {esc(pricing.get('scheme'))}, {esc(pricing.get('input_usd_per_mtok'))} USD per "
                    f"million input tokens")
    peaks = [int(c.get("tokens", 0) or 0) for r in rows.values() for c in r.get("timeline") or ()]
    # The scale shows the window when the session comes near it; a short session gets its own scale.
    near_window = int(window) if window and max(peaks, default=0) * WINDOW_IN_SCALE >= window else 0
    top_value = max([*peaks, near_window, 1])
    step = nice_step(top_value, 5)
    top = step * math.ceil(top_value / step)
    charts = []
    for name, row in rows.items():
        timeline = row.get("timeline") or []
        caption = (f"{fmt_int(row.get('cumulative_input_tokens'))} tokens in all · peak "
                   f"{fmt_int(row.get('peak_tokens'))} · {fmt_usd(row.get('cost_cached_usd'))} cached")
        charts.append(f'<figure class="chart{" ours" if name == "ctxwin" else ""}"><figcaption><b>{esc(name)}</b>'
                      f'<span class="muted">{caption}</span></figcaption>'
                      f"{timeline_svg(name, timeline, top, window, row.get('budget'))}</figure>")
    anchor = f"session-{number}"
    return (f'<section class="card session" id="{anchor}"><h2 title="{esc(file)}">{esc(Path(file).name)}</h2>'
            f'<p class="meta">{" · ".join(m for m in meta if m)}</p>'
            f"<h3>Policies compared</h3>{comparison_table(data)}"
            f"<h3>Tokens sent at every model call</h3>{_legend()}"
            f'<div class="charts">{"".join(charts)}</div></section>')


def _embedded(sessions: Sequence[Mapping[str, Any]], retention: Mapping[str, Any] | None) -> str:
    """The numbers behind the tables as JSON, for anyone who wants them (`EMBED_SKIP` left out).
    `<`, `>` and `&` are escaped so no string can close the script element."""
    data = {"ctxwin_version": ctxwin.__version__,
            "sessions": [{k: v for k, v in s.items() if k != "policies"}
                         | {"policies": {n: {k: v for k, v in r.items() if k not in EMBED_SKIP}
                                         for n, r in s.get("policies", {}).items()}} for s in sessions],
            "retention_summary": (retention or {}).get("summary")}
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


HOW_TO_READ = """
<p>Each session was replayed call by call: wherever the real agent called its model, each policy prepared the
request it would have sent. No model is called; these are the requests each policy <em>would</em> have sent.</p>
<ul>
<li><b>Input tokens, all calls</b> adds up every request: what the model reads over the session. <b>Peak
request</b> is the largest one; it must fit the model's window.</li>
<li><b>Cost, cached</b> prices prompt caching: the part of a request that repeats the previous request's prefix is
a cache read (0.1× the input price on Anthropic), the rest a cache write (1.25×). Editing old content on every
call breaks the prefix, so fewer tokens can still cost more. <b>Prefix kept</b>: the share of calls that reused
the whole previous request.</li>
<li>Timelines: colours show what each request is made of. A <span class="red">red line</span> is a compaction
(old history replaced by a summary); <span class="orange">orange ticks</span> are other edits of content already
sent (masking, pruning, fitting). The strip under each chart is green where the cache could reuse the request,
amber where part of it, red where none. Hover a chart for the numbers of a call.</li>
<li><b>Retention</b>: at each compaction point (real, or synthetic at 50 % and 80 % of the calls) each policy
compacts, and facts of the evicted history are looked for in what the model sees next: files modified and read,
error lines, commands, identifiers the user gave, identifiers the agent needed next, the user's instructions.
Content behind a handle counts only if the handle returns it byte-identical.</li>
<li>The best value of each column is <span class="best-chip">highlighted</span>; <span class="bad-chip">red</span>
flags an invalid or over-budget request (there should be none).</li>
</ul>
"""


def render_report(
    sessions: Sequence[Mapping[str, Any]],
    retention: Mapping[str, Any] | None = None,
    *,
    title: str = "ctxwin report",
    intro: str | None = None,
    command: str | None = None,
) -> str:
    """The report page for comparisons (`Comparison.to_dict()`, one per session) and an optional
    retention result (`RetentionResult.to_dict()`). `intro` and `command` are shown as plain text."""
    if not sessions and not retention:
        raise InputError("nothing to report", "give at least one session")
    names = list(dict.fromkeys(n for s in sessions for n in s.get("policies", {})))
    parts: list[str] = []
    lede = (f"{len(sessions)} session{'s' if len(sessions) != 1 else ''} replayed under "
            f"{len(names)} polic{'ies' if len(names) != 1 else 'y'}: {', '.join(names)}.")
    parts.append(f'<header><h1>{esc(title)}</h1><p class="lede">{esc(lede)}</p>')
    if intro:
        parts.append(f'<p class="intro">{esc(intro)}</p>')
    if command:
        parts.append(f'<p class="command">Produced by <code>{esc(command)}</code></p>')
    parts.append("</header>")
    links = [(f"session-{i}", Path(str(s.get("file") or f"session {i}")).name) for i, s in enumerate(sessions, 1)]
    if len(sessions) > 1:
        links.insert(0, ("all-sessions", "all sessions"))
    if retention and retention.get("summary"):
        links.append(("retention", "retention"))
    links.append(("how-to-read", "how to read this"))
    parts.append('<nav class="toc">' + "".join(f'<a href="#{a}">{esc(text)}</a>' for a, text in links) + "</nav>")
    if len(sessions) > 1:
        parts.append('<section class="card" id="all-sessions"><h2>All sessions together</h2>'
                     '<p class="meta">Summed over every session each policy ran on; the peak is the largest request '
                     f"of any session.</p>{comparison_table({'policies': totals(sessions)})}</section>")
    for number, session in enumerate(sessions, 1):
        parts.append(session_section(session, number))
    if retention and retention.get("summary"):
        probe_types = list(retention.get("probe_types") or _probe_types(retention["summary"]))
        points = retention.get("sessions") or []
        parts.append('<section class="card" id="retention"><h2>What the model still knows after compaction</h2>'
                     f'<p class="meta">Recall of probe facts by type in the text of the view the model gets next, '
                     f"pooled over {fmt_int(len(points))} compaction point(s); after a slash, the recall with what the "
                     "view's refs return byte for byte, where that is more (the model gets it only by asking). View "
                     "tokens is the mean size of that view. Open a point for its details and the facts each policy "
                     "lost (from its text).</p>"
                     f"{retention_table(retention['summary'], probe_types)}"
                     f"{retention_points(points, probe_types)}</section>")
    parts.append(f'<details class="card how" id="how-to-read" open><summary>How to read this</summary>{HOW_TO_READ}'
                 "</details>")
    parts.append(f'<footer>ctxwin {esc(ctxwin.__version__)} · a self-contained page: no scripts, fonts or images '
                 "are loaded from anywhere.</footer>")
    page = Template(resources.files(__package__).joinpath(TEMPLATE).read_text("utf-8"))
    # substitute() scans only the template, so text in the values is never substituted again.
    return page.substitute(title=esc(title), body="\n".join(parts), data=_embedded(sessions, retention))


def _probe_types(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    skip = {"view_tokens", "points"}
    return list(dict.fromkeys(k for row in summary.values() for k in row if k not in skip))


# --------------------------------------------------------------------------------------------------
# The library call behind `ctxwin report`


Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class ReportResult:
    """What `report` wrote, and how long each part took."""

    path: str
    bytes: int
    sessions: list[str]
    policies: list[str]
    retention_points: int
    seconds: dict[str, float] = field(default_factory=dict)
    comparisons: list[dict[str, Any]] = field(default_factory=list, repr=False)
    retention: dict[str, Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.bytes, "sessions": self.sessions, "policies": self.policies,
                "retention_points": self.retention_points, "seconds": self.seconds,
                "comparison": [{k: v for k, v in c.items() if k != "policies"}
                               | {"policies": {n: {k: v for k, v in r.items() if k != "timeline"}
                                               for n, r in c.get("policies", {}).items()}}
                               for c in self.comparisons],
                "retention_summary": (self.retention or {}).get("summary")}


def policies_for(transcript: Transcript, requested: Sequence[str] | None) -> list[str]:
    """The policies to run on one transcript: those asked for, or every preset plus `recorded` when
    the file has usage records to build it from."""
    if requested:
        return list(dict.fromkeys(requested))
    return [p for p in DEFAULT_POLICIES if p != RECORDED or transcript.usage]


def check_output(output: str | Path) -> Path:
    """The report's path, refused before any work when it cannot be written as a file."""
    path = Path(output)
    if path.is_dir():
        raise InputError(f"{path} is a folder", "give a file name such as report.html")
    if not path.parent.is_dir():
        raise InputError(f"{path.parent} does not exist", "create the folder first, or write the report elsewhere")
    return path


def write_report(html_text: str, output: str | Path) -> int:
    """Write the page (UTF-8); returns its size in bytes."""
    path = check_output(output)
    data = html_text.encode("utf-8")
    path.write_bytes(data)
    return len(data)


def report(
    files: Sequence[str | Path],
    output: str | Path = "report.html",
    *,
    policies: Sequence[str] | None = None,
    model: str | None = None,
    window: int | None = None,
    with_retention: bool = True,
    progress: Progress | None = None,
    title: str = "ctxwin report",
    command: str | None = None,
) -> ReportResult:
    """Replay each session file under each policy, score retention, and write the HTML report."""
    if not files:
        raise InputError("no session file given", "name session files: ctxwin report FILE... -o report.html")
    check_output(output)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    transcripts = [load_transcript(f) for f in files]
    seconds["load"] = _since(started)
    comparisons = []
    mark = time.perf_counter()
    for transcript in transcripts:
        names = policies_for(transcript, policies)
        comparisons.append(compare(transcript, names, model=model, window=window, progress=progress).to_dict())
    seconds["compare"] = _since(mark)
    retention_data = None
    if with_retention:
        mark = time.perf_counter()
        names = list(dict.fromkeys(n for t in transcripts for n in policies_for(t, policies)))
        retention_data = score_retention(transcripts, names, model=model, window=window, progress=progress).to_dict()
        seconds["retention"] = _since(mark)
    mark = time.perf_counter()
    size = write_report(render_report(comparisons, retention_data, title=title, command=command), output)
    seconds["render"] = _since(mark)
    seconds["total"] = _since(started)
    return ReportResult(str(output), size, [str(t.source) for t in transcripts],
                        list(dict.fromkeys(n for c in comparisons for n in c.get("policies", {}))),
                        len((retention_data or {}).get("sessions") or ()), seconds, comparisons, retention_data)


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 3)
