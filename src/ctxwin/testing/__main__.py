"""`python -m ctxwin.testing --port P --window W --script demo`: the fake provider on 127.0.0.1 with a
scripted model, until Ctrl-C, so anyone can try an agent loop, the proxy or their own harness offline.
Point OpenAI clients at http://127.0.0.1:P/v1 and Anthropic clients at http://127.0.0.1:P (any key)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from ctxwin.testing.scripted import DEMO_TURNS, demo_model
from ctxwin.testing.server import DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT, FakeProvider


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctxwin.testing", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one, printed)")
    parser.add_argument("--window", type=int, default=DEFAULT_CONTEXT_WINDOW, help="context window in tokens")
    parser.add_argument("--max-output", type=int, default=DEFAULT_MAX_OUTPUT, help="largest max_tokens accepted")
    parser.add_argument("--script", choices=("demo", "echo"), default="demo",
                        help="demo: a long tool-using task; echo: the deterministic short reply")
    parser.add_argument("--turns", type=int, default=DEMO_TURNS, help="model calls per task (demo script)")
    parser.add_argument("--stream-delay", type=float, default=0.0, help="seconds between streamed events")
    args = parser.parse_args(argv)
    if args.window < 1 or args.max_output < 1 or args.turns < 1 or not 0 <= args.port < 65536:
        parser.error("--window, --max-output and --turns must be positive, --port within 0-65535")
    model = demo_model(args.turns) if args.script == "demo" else None
    fake = FakeProvider(context_window=args.window, max_output=args.max_output, model=model, port=args.port,
                        stream_delay=args.stream_delay)
    try:
        fake.start()
    except OSError as error:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {error.strerror or error}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"fake provider listening on {fake.base_url} (OpenAI: {fake.openai_base_url}, Anthropic: "
          f"{fake.anthropic_base_url}); window {args.window}, script {args.script}", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
