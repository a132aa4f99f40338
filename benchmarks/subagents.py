"""How fast an interrupt stops a tree of sub-agents.

A parent on the fake provider (real HTTP on 127.0.0.1) delegates 6 parallel tasks (4 run at once, 2
wait for a worker) or a chain of 3; every child's model call is held `--hold` seconds at the fake.
Once 4 (parallel) or 1 (chain) child calls are held, the parent is interrupted: in process
(`agent.interrupt()`), and `ctxwin run` in a real process under SIGINT. Reports, per API and case,
the median milliseconds from the interrupt to the parent's return (the process's exit for `ctxwin
run`, interpreter shutdown included) and the children that started after the interrupt (the issue's
bound: 0, and a return well inside the hold). Rounds alternate the cases.

Then a fork at a masking-batch boundary (11 reads of ~40-line files in a 60K window, the `ctxwin`
policy: the fork's clone and placeholders put 9 results past the last 4, over the batch of 8): the
input tokens of the fork's first request and how many of them the fake's prompt-cache accounting
reports read from the cache, per API. Prints one JSON object on its last line.

    python benchmarks/subagents.py [--rounds R] [--hold SECONDS]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ctxwin.agent import AgentConfig, HttpModel, SubAgents, create_agent
from ctxwin.providers import client_for
from ctxwin.testing import Call, FakeProvider, ModelRequest, Reply
from ctxwin.tools import Workspace

MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4o"}
WINDOW = 32_000
MAX_OUTPUT = 1_000
CASES = {"parallel": ([f"job {n}" for n in range(1, 7)], 4), "chain": (["first", "then {previous}", "last"], 1)}


class Scripted:
    """The model: the parent delegates, each child's call is held, the parent ends once it has results."""

    def __init__(self, mode: str, hold: float) -> None:
        self.tasks, self.running = CASES[mode]
        self.mode, self.hold = mode, hold
        self.started: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> Reply:
        first = next(m for m in request.messages if m.role == "user")
        if first.text.startswith("Task: "):
            with self.lock:
                self.started.append(time.monotonic())
            time.sleep(self.hold)
            return Reply("child answer")
        if any(m.role == "tool" for m in request.messages):
            return Reply("All done.")
        return Reply("Delegating.", (Call("task", {"tasks": self.tasks, "mode": self.mode}, "p"),))

    def wait_running(self) -> None:
        deadline = time.monotonic() + 60
        while len(self.started) < self.running:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(self.started)} children started")
            time.sleep(0.005)

    def late(self, since: float) -> int:
        with self.lock:
            return sum(1 for t in self.started if t > since)


def in_process(api: str, mode: str, hold: float) -> tuple[float, int]:
    script = Scripted(mode, hold)
    with FakeProvider(model=script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake, \
            tempfile.TemporaryDirectory() as tmp:
        url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
        model = HttpModel(client_for(api, url, MODELS[api], api_key="k"))  # type: ignore[arg-type]
        subagents = SubAgents()
        agent = create_agent(model, workspace=Workspace([Path(tmp)], model=MODELS[api]), window=WINDOW,
                             max_output=MAX_OUTPUT, config=AgentConfig(max_tokens=MAX_OUTPUT),
                             extra_tools=subagents.tools())
        subagents.attach(agent)
        worker = threading.Thread(target=agent.run, args=("Delegate the work.",))
        worker.start()
        script.wait_running()
        started = time.monotonic()
        agent.interrupt()
        worker.join()
        return (time.monotonic() - started) * 1000, script.late(started)


def under_sigint(api: str, mode: str, hold: float) -> tuple[float, int]:
    script = Scripted(mode, hold)
    with FakeProvider(model=script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake, \
            tempfile.TemporaryDirectory() as tmp:
        url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
        process = subprocess.Popen(
            [sys.executable, "-m", "ctxwin.cli.main", "run", "Delegate the work.", "--base-url", url, "--api", api,
             "--session", str(Path(tmp) / "runs" / "s"), "--workspace", tmp, "--window", str(WINDOW),
             "--max-output", str(MAX_OUTPUT), "--api-key", "k", "--json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        script.wait_running()
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        process.wait()
        return (time.monotonic() - started) * 1000, script.late(started)


def fork_cache(api: str) -> dict[str, int]:
    """The fork's first request at a masking-batch boundary: its input tokens and those read from cache."""
    forks: list[dict[str, Any]] = []

    def answer(request: ModelRequest) -> Reply:
        if any(m.role == "user" and "<fork-boilerplate>" in m.text for m in request.messages):
            return Reply("fork done")
        reads = sum(1 for m in request.messages for c in m.tool_calls if c.name == "read")
        if any(c.name == "task" for m in request.messages for c in m.tool_calls):
            return Reply("All done.")
        if reads < 11:
            return Reply(f"Reading {reads}.", (Call("read", {"path": f"f{reads:03d}.txt"}, f"r{reads}"),))
        return Reply("Forking.", (Call("task", {"task": "check f002", "context": "fork"}, "k1"),
                                  Call("read", {"path": "f005.txt"}, "k2")))

    with FakeProvider(model=answer, context_window=60_000, max_output=MAX_OUTPUT) as fake, \
            tempfile.TemporaryDirectory() as tmp:
        for n in range(16):
            Path(tmp, f"f{n:03d}.txt").write_text("".join(
                f"file {n:03d} line {i:02d}: value-{n * 100 + i} lorem ipsum dolor sit amet\n" for i in range(40)))
        url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
        model = HttpModel(client_for(api, url, MODELS[api], api_key="k"))  # type: ignore[arg-type]
        subagents = SubAgents()
        agent = create_agent(model, workspace=Workspace([Path(tmp)], model=MODELS[api]), window=60_000,
                             max_output=MAX_OUTPUT, config=AgentConfig(max_tokens=MAX_OUTPUT),
                             extra_tools=subagents.tools())
        subagents.attach(agent)
        agent.run("Read the files, then fork a side check.")
        forks = [r.response["usage"] for r in fake.requests if "<fork-boilerplate>" in json.dumps(r.body)]
    usage = forks[0]
    if api == "anthropic":
        cached = usage.get("cache_read_input_tokens") or 0
        return {"input_tokens": usage["input_tokens"] + cached + (usage.get("cache_creation_input_tokens") or 0),
                "cache_read_tokens": cached}
    return {"input_tokens": usage["prompt_tokens"],
            "cache_read_tokens": usage["prompt_tokens_details"]["cached_tokens"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=3.0)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {}
    late: dict[str, int] = {}
    for _ in range(args.rounds):  # alternated, so load on the shared machine hits every case alike
        for api in MODELS:
            for mode in CASES:
                for where, measure in (("in_process", in_process), ("ctxwin_run_sigint", under_sigint)):
                    if where == "ctxwin_run_sigint" and mode == "chain":
                        continue  # one process case is enough: the tree's cancel is the same code
                    key = f"{where}.{api}.{mode}"
                    ms, started_after = measure(api, mode, args.hold)
                    samples.setdefault(key, []).append(ms)
                    late[key] = late.get(key, 0) + started_after
    out: dict[str, Any] = {"hold_s": args.hold, "rounds": args.rounds}
    for key, values in samples.items():
        out[key] = {"median_ms": round(statistics.median(values), 1), "max_ms": round(max(values), 1),
                    "children_started_after": late[key]}
    for api in MODELS:
        out[f"fork_at_mask_boundary.{api}"] = fork_cache(api)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
