"""The policy: every knob of every pipeline stage, one typed model per stage.

Each field documents itself (the docstring under it is the field's description, also printed by
`ctxwin policies --show`). Presets are TOML files next to this module; a user's TOML file is loaded
the same way and may override any subset of fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from ctxwin.errors import InputError

Count = Annotated[int, Field(ge=0)]
"""A number of tokens, characters, messages or results: never negative."""
Share = Annotated[float, Field(ge=0.0, le=1.0)]
"""A share of something, between 0 and 1."""


class _Stage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, defer_build=True)


class BootstrapPolicy(_Stage):
    enabled: bool = False
    """Load workspace context files into the system prompt."""
    files: list[str] = Field(
        default_factory=lambda: [
            "AGENTS.md", "CLAUDE.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", "MEMORY.md",
        ]
    )
    """File names looked up in the workspace root, injected in this order."""
    per_file_max_chars: Count = 20_000
    """Per-file cap in characters; a longer file keeps its head and tail around a marker naming it."""
    total_max_chars: Count = 60_000
    """Cap on all files together, consumed in order; a file that overflows is cut to what is left."""
    head_share: Share = 0.75
    """Share of a cut file's budget given to its head (the rest, minus the marker, to its tail)."""


class ResultBudgetPolicy(_Stage):
    enabled: bool = False
    """Cap each tool result (OpenClaw's live tool-result cap, Letta's per-request cap)."""
    max_chars: Count = 16_000
    """Upper bound per tool result, in characters."""
    window_share: Share = 0.3
    """The cap is also at most this share of the context window (window tokens x 4 characters)."""
    min_chars: Count = 2_000
    """Floor of the cap: the cap never goes below this many characters (a cut result keeps about this
    much text, less the notice)."""
    tail_share: Share = 0.3
    """When the tail looks important (errors, totals, a closing brace), this share of the cap goes to it."""
    tail_max_chars: Count = 4_000
    """Upper bound of the kept tail, in characters."""


class SpillPolicy(_Stage):
    enabled: bool = False
    """Move oversized tool results to the blob store; the view keeps a preview and the handle."""
    per_result_chars: Count = 50_000
    """A result over this many characters is spilled (Claude Code's 50K default)."""
    per_message_chars: Count = 200_000
    """When one turn's results together exceed this, the largest are spilled until under it."""
    preview_chars: Count = 2_000
    """Size of the preview kept in the view, cut at a line end when one is past half of it."""


class DedupPolicy(_Stage):
    enabled: bool = False
    """Replace repeated content with a short stub pointing at the earlier (or later) copy."""
    rereads: bool = True
    """An identical re-read of the same file range becomes a stub pointing at the earlier result."""
    idempotent_tools: list[str] = Field(default_factory=list)
    """Tools whose repeated identical calls keep only the newest output (older copies become stubs)."""
    min_chars: Count = 200
    """Results shorter than this are never replaced (the stub would not save anything)."""


class MaskPolicy(_Stage):
    enabled: bool = False
    """Observation masking: old tool outputs become placeholders that say how to get them back."""
    keep_last: Count = 10
    """The most recent tool results kept verbatim (JetBrains' last-N observations)."""
    batch: Count = 1
    """Mask only once this many results are due, all at once, so the prompt prefix changes rarely."""
    trigger_tokens: Count = 0
    """Mask only while the view is above this many tokens (0: always)."""
    trigger_ratio: Share = 0.0
    """Mask only while the view is above this share of the budget (0: always)."""
    min_tokens: Count = 50
    """Results smaller than this stay (a placeholder would cost as much)."""
    tools_allow: list[str] = Field(default_factory=list)
    """Only these tools are masked (glob patterns, case-insensitive; empty: all)."""
    tools_deny: list[str] = Field(default_factory=list)
    """These tools are never masked (wins over the allow list)."""
    call_inputs_chars: Count = 0
    """Also clear the string arguments of old tool calls longer than this many characters (the file
    contents of write and edit calls), keeping paths and short arguments (0: never; Anthropic's
    `clear_tool_inputs`)."""
    reread_hint: bool = False
    """Placeholders of file reads also say how to read the file again with the agent's own tool
    (`offset`/`limit`), for harnesses that have no recall tool (the proxy with its recall tool off)."""


class PrunePolicy(_Stage):
    enabled: bool = False
    """OpenClaw's context pruning: soft-trim, then hard-clear old tool results by context ratio."""
    mode: Literal["always", "cache-ttl"] = "cache-ttl"
    """`cache-ttl` prunes only once the provider's prompt cache has expired (no call within `ttl_seconds`)."""
    ttl_seconds: Annotated[float, Field(ge=0.0)] = 300
    """Prompt-cache lifetime assumed by the cache-ttl mode."""
    keep_last_assistants: Count = 3
    """Tool results after the N-th last assistant message are protected."""
    soft_trim_ratio: Share = 0.3
    """Soft-trim starts when the view's characters exceed this share of the window (in characters)."""
    hard_clear_ratio: Share = 0.5
    """Hard-clear starts at this share, oldest first, until the view is back under it."""
    min_prunable_chars: Count = 50_000
    """Hard-clear only when prunable results hold at least this many characters."""
    soft_trim_max_chars: Count = 4_000
    """Results longer than this are soft-trimmed."""
    soft_trim_head_chars: Count = 1_500
    """Characters kept at the head of a soft-trimmed result."""
    soft_trim_tail_chars: Count = 1_500
    """Characters kept at the tail of a soft-trimmed result."""
    hard_clear: bool = True
    """Allow hard-clearing at all."""
    placeholder: str = "[Old tool result content cleared]"
    """Text of a hard-cleared result (ctxwin appends where to get the content back)."""
    tools_allow: list[str] = Field(default_factory=list)
    """Only these tools are pruned (glob patterns, case-insensitive; empty: all)."""
    tools_deny: list[str] = Field(default_factory=list)
    """These tools are never pruned (wins over the allow list)."""


class CompactionSection(_Stage):
    """The knobs every compaction strategy shares; each strategy's own section (below) adds its own
    knobs and its `strategy` field, whose one `Literal` value is the strategy's name: the only place
    it is spelled (`COMPACTION_SECTIONS` lists the sections; everything else is derived from it)."""

    strategy: str
    """Which anchor's algorithm decides what is summarized and what is kept."""

    enabled: bool = False
    """Summarize the oldest span when the view passes the trigger."""
    reserve_tokens: Count = 16_384
    """Trigger when the view exceeds window - reserve_tokens (Pi's threshold; Claude Code uses 13,000
    below the effective window)."""
    trigger_ratio: Share | None = None
    """Trigger at this share of the window instead (Letta: 0.9)."""
    summary_max_tokens: Count = 13_107
    """Upper bound of a summary's tokens (Pi: 0.8 x reserve)."""
    min_gain_ratio: Share = 0.1
    """A compaction must remove at least this share of the view's tokens, or it counts as failed
    (no-op compactions must not burn the retry budget; OpenClaw #150447)."""
    max_failures: Count = 3
    """Circuit breaker: after this many consecutive failed compactions, stop trying (Claude Code)."""
    trigger_tokens: Count | None = None
    """Also trigger when the view exceeds this many tokens, whatever the window (OpenClaw's
    `autoTrigger.tokenThreshold`); the first trigger reached wins."""
    trigger_turns: Count | None = None
    """Also trigger when the view holds more than this many turns (a turn: a user message and what
    follows it; OpenClaw's `autoTrigger.turnThreshold`); the first trigger reached wins."""
    max_turns: Count | None = None
    """The view holds at most this many turns (OpenClaw's `max_turns`): older ones leave it, dropped
    (kept in the log, a marker says where) or, with `summary_after`, summarized."""
    summary_after: Count | None = None
    """With `max_turns`: summarize the turns past `max_turns` once this many have piled up, instead of
    dropping them (batched, so the summary and the cached prefix change every N turns, not every turn)."""
    identifier_policy: Literal["strict", "off"] = "strict"
    """`strict`: after any summary, every identifier of the summarized span (paths, hashes, ids, URLs,
    numbers, error codes) that the summary lost is appended verbatim (OpenClaw's identifierPolicy).
    `off`: the summary stands as the summarizer wrote it."""


class KeepsRecentSection(CompactionSection):
    """The sections of the strategies that keep a recent tail verbatim after the summary."""

    keep_recent_tokens: Count = 20_000
    """Tokens of recent history kept verbatim after the summary."""
    keep_recent_turns: Count = 0
    """Also keep at least this many recent turns verbatim (OpenClaw's `preserveRecent`); the kept
    tail is whichever of the two holds more history (0: by tokens only)."""

    @model_validator(mode="after")
    def _turns(self) -> KeepsRecentSection:
        if self.trigger_turns is not None and self.keep_recent_turns >= self.trigger_turns:
            raise ValueError("keep_recent_turns must be below trigger_turns, or every request would compact again")
        if self.max_turns is not None and self.keep_recent_turns > self.max_turns:
            raise ValueError("keep_recent_turns must not exceed max_turns")
        return self


class PiCompaction(KeepsRecentSection):
    """Pi: walk back `keep_recent_tokens` from the newest message, cut at a turn boundary, summarize
    a split turn's prefix apart."""

    strategy: Literal["pi"] = "pi"


class OpenClawCompaction(KeepsRecentSection):
    """OpenClaw's safeguard: Pi's cut, with the kept history also bounded by a share of the window."""

    strategy: Literal["openclaw"] = "openclaw"
    history_share: Share = 0.5
    """The share of the window the kept history may use before older chunks are dropped into the
    summary."""


class ClaudeCodeCompaction(CompactionSection):
    """Claude Code: summarize everything, then re-attach the most recently read files."""

    strategy: Literal["claude-code"] = "claude-code"
    restore_recent_files: Count = 0
    """Re-attach up to this many recently read files after the summary."""
    restore_file_tokens: Count = 5_000
    """Token cap per re-attached file."""
    restore_total_tokens: Count = 50_000
    """Token cap on all re-attached files."""


class LettaCompaction(CompactionSection):
    """Letta: a sliding window evicting 30 %, then 10 % more per step, until under `target_ratio`."""

    strategy: Literal["letta"] = "letta"
    target_ratio: Share | None = None
    """The view's size after a compaction, as a share of the window: evict until under it (0.7)."""
    mode: Literal["sliding", "all"] = "sliding"
    """`all` summarizes everything but the system prompt."""


class CheckpointCompaction(KeepsRecentSection):
    """Alyx's checkpoint: past a mark the agent writes its own state summary, which then stands for
    the history before it."""

    strategy: Literal["checkpoint"] = "checkpoint"
    checkpoint_tokens: Count = 0
    """Past this many tokens the agent is asked to write its own state summary (0: at 75 % of the
    trigger)."""


class CtxwinCompaction(KeepsRecentSection):
    """ctxwin: compact early to a small view, keeping as much recent history verbatim as fits."""

    strategy: Literal["ctxwin"] = "ctxwin"
    target_ratio: Share | None = None
    """The view's size after a compaction, as a share of the window: as much recent history is kept
    verbatim as fits under it, with `keep_recent_tokens` as the floor."""


COMPACTION_SECTIONS: tuple[type[CompactionSection], ...] = (
    PiCompaction, OpenClawCompaction, ClaudeCodeCompaction, LettaCompaction, CheckpointCompaction, CtxwinCompaction)
"""The registry of compaction strategies, by their policy sections: the policy union, the names and
the strategies of `ctxwin.compaction` are all derived from it (a new strategy is one section here
and one `Strategy` class there)."""


def section_name(section: type[CompactionSection]) -> str:
    """A section's strategy name: the default of its `strategy` field (its one Literal value)."""
    return str(section.model_fields["strategy"].default)


COMPACTION_MODELS: dict[str, type[CompactionSection]] = {section_name(s): s for s in COMPACTION_SECTIONS}
"""Every compaction section by its strategy name."""
STRATEGIES: tuple[str, ...] = tuple(COMPACTION_MODELS)
"""Every compaction strategy, by the name a policy gives in `compaction.strategy`."""
DEFAULT_STRATEGY = "pi"
"""A [compaction] table without `strategy` means Pi's (the field's default before it was a union)."""


def _strategy_of(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("strategy", DEFAULT_STRATEGY))
    return str(getattr(value, "strategy", DEFAULT_STRATEGY))


if TYPE_CHECKING:
    # The checker sees the base class: code that needs one strategy's knobs narrows to its section.
    CompactionPolicy: TypeAlias = CompactionSection
else:
    CompactionPolicy = Annotated[
        Union[tuple(Annotated[section, Tag(name)] for name, section in COMPACTION_MODELS.items())],  # noqa: UP007
        Discriminator(_strategy_of),
    ]
    """The compaction section: one model per strategy, chosen by its `strategy` field."""


def compaction_for(strategy: str, current: CompactionSection | None = None, **update: Any) -> CompactionSection:
    """The compaction section for `strategy`, keeping the knobs of `current` that it shares."""
    model = COMPACTION_MODELS.get(strategy)
    if model is None:
        raise InputError(f"unknown compaction strategy {strategy!r}", f"choose one of {', '.join(STRATEGIES)}")
    known = model.model_fields
    base = {k: v for k, v in (current.model_dump() if current is not None else {}).items() if k in known}
    base.pop("strategy", None)
    return model.model_validate({**base, **update})


class FitPolicy(_Stage):
    enabled: bool = True
    """The last guarantee that a request fits: drop old rounds, clamp results, middle-truncate."""
    drop_rounds: bool = True
    """Drop the oldest API rounds (an assistant message and its results) until the view fits."""
    keep_last_rounds: Count = 1
    """Rounds never dropped."""
    clamp_chars: Count = 5_000
    """Then clamp tool results to this many characters, oldest first (Letta)."""
    truncate_head_share: Share = 0.3
    """Then middle-truncate the largest messages, keeping this share at the head ..."""
    truncate_tail_share: Share = 0.3
    """... and this share at the tail (Letta's 30 % + 30 %)."""


class Policy(BaseModel):
    """Everything the pipeline does, stage by stage. Unset stages are off, except `fit`."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, defer_build=True)

    name: str = "custom"
    """Name shown in reports."""
    description: str = ""
    """One line on what this policy is for."""
    output_reserve_tokens: Count = 20_000
    """Tokens kept free for the model's answer (capped by the model's max output)."""
    safety_margin_tokens: Count = 1_000
    """Extra tokens kept free for counting error."""
    unlimited_window: bool = False
    """Ignore the model's window (the `raw` baseline: nothing managed)."""
    bootstrap: BootstrapPolicy = Field(default_factory=BootstrapPolicy)
    result_budget: ResultBudgetPolicy = Field(default_factory=ResultBudgetPolicy)
    spill: SpillPolicy = Field(default_factory=SpillPolicy)
    dedup: DedupPolicy = Field(default_factory=DedupPolicy)
    mask: MaskPolicy = Field(default_factory=MaskPolicy)
    prune: PrunePolicy = Field(default_factory=PrunePolicy)
    compaction: CompactionPolicy = Field(default_factory=PiCompaction)
    fit: FitPolicy = Field(default_factory=FitPolicy)

    @model_validator(mode="after")
    def _check(self) -> Policy:
        if self.bootstrap.head_share < 0 or self.bootstrap.head_share > 1:
            raise ValueError("bootstrap.head_share must be between 0 and 1")
        if self.mask.batch < 1:
            raise ValueError("mask.batch must be at least 1")
        if self.prune.soft_trim_ratio > self.prune.hard_clear_ratio:
            raise ValueError("prune.soft_trim_ratio must not exceed prune.hard_clear_ratio")
        return self

    def reserve(self, max_output: int) -> int:
        """Tokens that must stay free in the window: the output budget plus the safety margin."""
        return min(self.output_reserve_tokens, max_output) + self.safety_margin_tokens
