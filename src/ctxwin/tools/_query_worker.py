"""The child process query_json runs a jq or JMESPath expression in (see `spilled.query_json`).

Run as a script (`python -I _query_worker.py LANGUAGE EXPR MAX_MEMORY KEEP_LINES KEEP_BYTES COUNT_LINES`)
with the JSON on stdin; it imports nothing from ctxwin, so it starts in tens of milliseconds. It caps
its own address space first (RLIMIT_AS), so an expression that builds an endless array (`[range(1e9)]`)
ends this process, never the harness's. It prints one JSON object: the first result lines (the
parent's page of them), how many lines there are in all (counted up to COUNT_LINES), or an error.
"""

import json
import resource
import sys


def _limit_memory(max_bytes: int) -> None:
    if max_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))


def _load(raw: bytes):
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        try:  # JSON Lines: one value per line
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise ValueError(f"{error.msg} at line {error.lineno} column {error.colno}") from None


def _results(value, expr: str, language: str):
    if language == "jq":
        import jq

        return iter(jq.compile(expr).input_value(value))
    import jmespath

    return iter([jmespath.search(expr, value)])


def main() -> None:
    language, expr = sys.argv[1], sys.argv[2]
    max_memory, keep_lines, keep_bytes, count_lines = (int(v) for v in sys.argv[3:7])
    _limit_memory(max_memory)
    out: dict = {"ok": True}
    try:
        value = _load(sys.stdin.buffer.read())
    except ValueError as error:
        out = {"ok": False, "error": "not_json", "message": str(error)}
    except RecursionError:
        out = {"ok": False, "error": "too_deep", "message": "the JSON is nested too deeply to parse"}
    except MemoryError:
        out = {"ok": False, "error": "out_of_memory", "message": "parsing the JSON needs more memory than allowed"}
    else:
        out = _run(value, expr, language, keep_lines, keep_bytes, count_lines)
    sys.stdout.write(json.dumps(out))


def _run(value, expr: str, language: str, keep_lines: int, keep_bytes: int, count_lines: int) -> dict:
    lines: list[str] = []
    kept_bytes = 0
    total = 0
    results = 0
    complete = True
    try:
        for result in _results(value, expr, language):
            results += 1
            for line in json.dumps(result, ensure_ascii=False, indent=2, default=str).split("\n"):
                total += 1
                if len(lines) < keep_lines and kept_bytes <= keep_bytes:
                    lines.append(line[: keep_bytes + 1])
                    kept_bytes += len(line.encode("utf-8")) + 1
            if total > count_lines:
                complete = False
                break
    except ImportError as error:
        return {"ok": False, "error": "missing_extra", "message": str(error)}
    except RecursionError:
        return {"ok": False, "error": "too_deep", "message": "the expression or its result is nested too deeply"}
    except MemoryError:
        return {"ok": False, "error": "out_of_memory", "message": "the query needs more memory than allowed"}
    except Exception as error:  # jq reports its errors as ValueError, JMESPath as JMESPathError
        return {"ok": False, "error": "bad_expression", "message": str(error)}
    return {"ok": True, "lines": lines, "total_lines": total, "results": results, "complete": complete}


if __name__ == "__main__":
    main()
