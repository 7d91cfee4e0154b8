#!/usr/bin/env python3
"""Checks that no test or tool assembles a training run by hand: a Scheduler is built inside engine/ (the
Trainer), and tests/ and tools/ train through the Trainer (engine/train/trainer.h: it takes a model name, a
network description or the caller's graph, with hooks around each batch). ALLOWED lists the files that still
build a Scheduler of their own and why; the list may only shrink: a file on it that no longer builds one is
an error too, so the list stays true. Exits 1 listing each problem."""
import pathlib
import re
import sys

# file -> why it still builds a Scheduler itself
ALLOWED = {
    "tests/trained_model.h": "the training-loop tests drive loader, scheduler and optimizer step by step",
    "tests/torch_parity_test.cc": "trains in float64 end to end (float64 inputs, weights and a float64 SGD written "
                                  "out), which the Trainer's data (uint8 or float32 pixels) and optimizers (float32) "
                                  "do not carry",
    "tests/norm_invariance_test.cc": "tests the scheduler's own check of micro-batches against BatchNorm groups",
}

BUILDS = re.compile(r"\bScheduler\s+\w+\s*[({;]|<Scheduler>|\bnew\s+Scheduler\b|\bScheduler\s*[({]")


def builds_scheduler(text: str) -> bool:
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)
    return bool(BUILDS.search(code))


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    found = set()
    for folder in ("tests", "tools"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix in (".cc", ".h", ".cu") and builds_scheduler(f.read_text()):
                found.add(f.relative_to(root).as_posix())
    problems = [f"{f}: builds a Scheduler by hand; train through the Trainer (Trainer(cfg, graph, data), "
                "set_batch_hooks)" for f in sorted(found - ALLOWED.keys())]
    problems += [f"{f}: on ALLOWED but builds no Scheduler any more; take it off the list"
                 for f in sorted(ALLOWED.keys() - found)]
    for p in problems:
        print(p)
    print(f"check_hand_runs: {len(found)} file(s) build a Scheduler, {len(ALLOWED)} allowed, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
