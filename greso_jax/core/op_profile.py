"""Where a compiled program's time goes: the op events of a `jax.profiler` trace, attributed to the
named scopes (`jax.named_scope`) that the program's optimised HLO records for each instruction.

An op event is one whose name (CPU: the thunk's HLO instruction) or `hlo_op` argument (GPU kernels)
names an instruction of the program's HLO (kernels run inside an XLA:GPU command buffer are named
by the buffer only, so profile with command buffers off). Control-flow instructions (while,
conditional, call) are left out: their events span their bodies, whose ops are counted themselves.
An instruction's scope is the innermost component of its `op_name` metadata path that is one of
the scopes asked for. XLA gives a fusion the metadata of its root; a fusion that holds matmuls counts where most of
their output was written instead, so a matmul with the next norm fused in counts as the matmul.

Times: `op_us` sums event durations per scope (on CPU, time on the thread that ran the op, while
other threads may help it; on GPU, kernel time); `busy_us` is the wall time during which at least
one op ran on any lane (thread or stream); the rest of the wall time is `idle` (host work, launch
and loop overheads, waiting)."""

from __future__ import annotations

import collections
import dataclasses
import glob
import gzip
import json
import math
import os
import re

OTHER = "other"
_CONTROL_FLOW = frozenset({"while", "conditional", "call"})
# `%name = shape opcode(operands), ..., metadata={op_name="a/b/c" ...}`: the opcode is the first word
# after a space that opens a parenthesis (a tuple shape opens with one, after no word).
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][\w\-]*)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\{\s*$")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_MATMULS = frozenset({"dot", "convolution"})


@dataclasses.dataclass(frozen=True)
class OpEvent:
    """One op's execution in a trace: HLO instruction name, start and duration (microseconds), lane."""

    name: str
    start_us: float
    duration_us: float
    lane: tuple


@dataclasses.dataclass(frozen=True)
class Breakdown:
    """A trace's op time by scope (microseconds): op_us, running_us (wall time with one of its ops
    running) and events per scope; wall span of the ops, busy_us (wall time with at least one op
    running), lanes (threads or streams that ran ops)."""

    op_us: dict[str, float]
    running_us: dict[str, float]
    events: dict[str, int]
    wall_us: float
    busy_us: float
    lanes: int

    @property
    def total_op_us(self) -> float:
        return sum(self.op_us.values())


def hlo_op_scopes(hlo_text: str, scopes) -> dict[str, str]:
    """HLO instruction name -> scope (OTHER when none), for every instruction of `hlo_text` but
    control flow: the innermost of `scopes` on its op_name path; for a fusion that holds matmuls,
    the scope of most of their output elements (XLA:CPU fuses a chain of matmuls, and the norm or
    reduction after them, into one library call named after its root)."""
    wanted = set(scopes)

    def scope_of(line: str) -> str:
        op_name = _OP_NAME.search(line)
        path = op_name.group(1).split("/") if op_name else []
        return next((part for part in reversed(path) if part in wanted), OTHER)

    computation, parsed = None, []  # (computation, name, opcode, scope, called computation, size)
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header is not None:
            computation = header.group(1)
            continue
        match = _INSTRUCTION.match(line)
        if match is not None:
            calls = _CALLS.search(line)
            parsed.append((computation, match.group(1), match.group(2), scope_of(line),
                           calls.group(1) if calls else None, _elements(line[match.end(1):match.start(2)])))
    matmul_scopes = collections.defaultdict(collections.Counter)  # computation -> scope -> output elements
    for computation, _, opcode, scope, _, size in parsed:
        if opcode in _MATMULS:
            matmul_scopes[computation][scope] += size
    result = {}
    for _, name, opcode, scope, called, _ in parsed:
        if opcode in _CONTROL_FLOW:
            continue
        inner = matmul_scopes.get(called) if opcode == "fusion" else None
        result[name] = inner.most_common(1)[0][0] if inner else scope
    return result


def _elements(shape: str) -> int:
    """Elements of the first array in an HLO shape string (`f32[8,16]{1,0}` -> 128; a scalar: 1)."""
    dims = re.search(r"\[([\d,]*)\]", shape)
    return math.prod(int(d) for d in dims.group(1).split(",") if d) if dims else 1


def load_trace_events(trace_dir: str) -> list[dict]:
    """The events of the newest perfetto trace (`*.trace.json.gz`) under `trace_dir`."""
    files = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
    if not files:
        raise FileNotFoundError(f"no *.trace.json.gz under {trace_dir} (was the trace taken with "
                                f"create_perfetto_trace=True?)")
    with gzip.open(max(files, key=os.path.getmtime)) as f:
        return json.load(f)["traceEvents"]


def op_events(trace_events: list[dict], known_ops) -> list[OpEvent]:
    """The complete events ("ph": "X") whose HLO op (args.hlo_op, else the event name) is in `known_ops`."""
    found = []
    for event in trace_events:
        if event.get("ph") != "X":
            continue
        name = (event.get("args") or {}).get("hlo_op", event.get("name", ""))
        if name in known_ops:
            found.append(OpEvent(name, float(event["ts"]), float(event.get("dur", 0.0)),
                                 (event.get("pid"), event.get("tid"))))
    return found


def breakdown(events: list[OpEvent], scope_of: dict[str, str]) -> Breakdown:
    """Sums `events` by the scope of their op and measures the wall time they cover."""
    if not events:
        raise ValueError("op_profile.breakdown: no op events (the trace does not name this program's ops)")
    op_us, counts, by_scope = collections.Counter(), collections.Counter(), collections.defaultdict(list)
    for event in events:
        scope = scope_of[event.name]
        op_us[scope] += event.duration_us
        counts[scope] += 1
        by_scope[scope].append(event)
    running = {scope: _covered_us(scope_events) for scope, scope_events in by_scope.items()}
    wall = max(e.start_us + e.duration_us for e in events) - min(e.start_us for e in events)
    return Breakdown(dict(op_us), running, dict(counts), wall, _covered_us(events), len({e.lane for e in events}))


def _covered_us(events: list[OpEvent]) -> float:
    """Wall time during which at least one of `events` runs (the length of their intervals' union)."""
    intervals = sorted((e.start_us, e.start_us + e.duration_us) for e in events)
    covered, (start, end) = 0.0, intervals[0]
    for lo, hi in intervals[1:]:
        if lo > end:
            covered, start, end = covered + end - start, lo, hi
        else:
            end = max(end, hi)
    return covered + end - start


def format_breakdown(result: Breakdown, per: int = 1, per_name: str = "call") -> str:
    """A markdown table: per scope, op time and wall time with one of its ops running (ms per
    `per_name`, `per` of them in the trace), that wall time's share of the wall span, and events;
    then the busy and idle wall time."""
    ms = lambda us: us / 1e3 / per  # noqa: E731
    total = result.total_op_us
    lines = [f"| scope | op ms per {per_name} | running ms per {per_name} | share of wall | events |",
             "|---|---:|---:|---:|---:|"]
    for scope, us in sorted(result.running_us.items(), key=lambda item: -item[1]):
        lines.append(f"| {scope} | {ms(result.op_us[scope]):.3f} | {ms(us):.3f} | {us / result.wall_us:.1%} | "
                     f"{result.events[scope]} |")
    lines.append(f"| **all ops** | {ms(total):.3f} | {ms(result.busy_us):.3f} | "
                 f"{result.busy_us / result.wall_us:.1%} | {sum(result.events.values())} |")
    idle = result.wall_us - result.busy_us
    lines += ["", f"wall {ms(result.wall_us):.3f} ms per {per_name}: some op running {ms(result.busy_us):.3f} "
              f"({result.busy_us / result.wall_us:.1%}), none {ms(idle):.3f} ({idle / result.wall_us:.1%}); "
              f"op time / wall = {total / result.wall_us:.2f} over {result.lanes} lane(s)"]
    return "\n".join(lines)
