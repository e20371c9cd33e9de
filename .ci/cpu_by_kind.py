"""Where CI's CPU goes: samples every process's CPU seconds (/proc/PID/stat) twice a second and adds each one's
growth to its kind (a Triton python stub by its model, a pytest worker, pip, the llama.cpp build's compilers, ...),
until SIGTERM or until the process that started it ends; then writes the table, largest first, against the
machine's busy seconds (/proc/stat).

    python3 .ci/cpu_by_kind.py OUT.md &  ...  kill -TERM $!

Every minute it also appends the totals so far to OUT.md's .jsonl twin, so that a step's share is the difference of
the lines around its start and end.

A process that ends between two samples loses its last half second (short compiler runs most): the table's last row
says how much of the machine's busy time no process was seen using."""

import json
import os
import re
import signal
import sys
import time
from collections import Counter

TICK = os.sysconf("SC_CLK_TCK")
KINDS = (  # (kind, pattern on the command line), first match wins
    ("triton stub {model}", re.compile(r"triton_python_backend_stub \S*/model_repository/(?P<model>[^/]+)/")),
    ("tritonserver", re.compile(r"/tritonserver\b")),
    # its server.py is copied into a run directory (a test's is under /tmp/pytest-of-*): known by its own option
    ("/v1 server: trtllm-serve stand-in", re.compile(r"stand_ins[./]trtllm_serve|serve-trtllm-stand-in|--stand-in-mark")),
    ("/v1 server: llama-cpp-python", re.compile(r"llama_cpp\.server")),
    ("pytest worker (xdist)", re.compile(r"exec\(eval\(sys\.stdin\.readline")),
    ("pytest", re.compile(r"\bpytest\b")),
    ("pip", re.compile(r"\bpip\b")),
    ("mypy", re.compile(r"\bmypy\b")),
    ("docker, debootstrap, apt", re.compile(r"\b(dockerd|containerd|docker|debootstrap|dpkg|apt-get|apt)\b")),
    ("nginx", re.compile(r"\bnginx\b")),
    ("other python", re.compile(r"\bpython")),
)


# by the program's own name: a compiler's arguments name pip's build directory
COMPILERS = {"cc1plus", "cc1", "c++", "g++", "gcc", "cc", "cmake", "ninja", "make", "ld", "as", "collect2"}


def kind_of(cmdline: str) -> str:
    if os.path.basename(cmdline.split(" ", 1)[0]) in COMPILERS:
        return "compilers (the llama.cpp wheel's build)"
    for kind, pattern in KINDS:
        found = pattern.search(cmdline)
        if found:
            return kind.format(**found.groupdict())
    return "other: " + os.path.basename(cmdline.split(" ", 1)[0])[:30]


def sample() -> dict[int, tuple[str, float]]:
    """pid -> (kind, CPU seconds so far) of every process readable now."""
    seen = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        seen[int(entry)] = (kind_of(cmdline) if cmdline else "kernel threads", (int(fields[11]) + int(fields[12])) / TICK)
    return seen


def machine_busy_s() -> float:
    with open("/proc/stat") as f:
        parts = [int(p) for p in f.readline().split()[1:]]
    return (sum(parts) - parts[3] - parts[4]) / TICK  # all but idle and iowait


def main(out: str) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    totals: Counter = Counter()
    last = sample()
    busy0, start, parent = machine_busy_s(), time.monotonic(), os.getppid()
    timeline, minute = open(out.removesuffix(".md") + ".jsonl", "w"), 0
    while not stop and os.getppid() == parent:  # a CI run that failed ends without stopping it
        time.sleep(0.5)
        if time.monotonic() - start >= 60 * (minute + 1):
            minute += 1
            timeline.write(json.dumps({"minute": minute, "cpu_s": {k: round(v) for k, v in totals.items()}}) + "\n")
            timeline.flush()
        now = sample()
        for pid, (kind, cpu) in now.items():
            before = last.get(pid)  # a new process used all it has since the last sample (or an exec changed its kind)
            totals[kind] += cpu - before[1] if before else cpu
        last = now
    busy, wall = machine_busy_s() - busy0, time.monotonic() - start
    rows = [f"| {kind} | {seconds:.0f} | {100 * seconds / busy:.1f}% |" for kind, seconds in totals.most_common() if seconds >= 1]
    unseen = busy - sum(totals.values())
    with open(out, "w") as f:
        f.write(f"CPU seconds by kind of process over {wall:.0f} s ({busy:.0f} busy CPU seconds on {os.cpu_count()} cores)\n\n")
        f.write("| kind | CPU s | share |\n|---|---|---|\n" + "\n".join(rows) + "\n")
        f.write(f"| (no process seen: ended between samples) | {unseen:.0f} | {100 * unseen / busy:.1f}% |\n")


if __name__ == "__main__":
    main(sys.argv[1])
